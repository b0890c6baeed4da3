"""Suffix drafting for engines that pass batch rows, not request ids: one C++ call per engine step.

:class:`SuffixRowBatch` runs :class:`~specdec.proposers.suffix.SuffixProposer`'s rules over an
engine's persistent batch (vLLM's ``custom_class`` drafter gets ``token_ids [rows_max, stride]``
int32, the committed length of each row and the tokens sampled this step). Request identity
comes from the rows' content (``csrc/suffix/row_tracker.h``), under the settings of
:class:`RowTracking`. Why C++: vLLM calls its drafter once per step with the whole batch, and a
Python call per request and per commit costs more than the draft itself.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._ext import load
from .suffix_options import SuffixCalibration, SuffixDrafting


@dataclasses.dataclass(frozen=True)
class RowTracking:
    """How long a request held by no row is kept: ended after ``park_steps`` steps or ``park_seconds``,
    or oldest first while over ``max_parked`` requests or ``max_parked_tokens`` tokens."""

    park_steps: int = 64
    max_parked: int = 1024
    max_parked_tokens: int = 1 << 22
    park_seconds: float = 600.0

    def __post_init__(self):
        for name in ("park_steps", "max_parked", "max_parked_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "park_steps" else 0):
                raise ValueError(f"RowTracking.{name} must be an int >= {1 if name == 'park_steps' else 0}, "
                                 f"got {value!r}")
        if not isinstance(self.park_seconds, (int, float)) or not self.park_seconds > 0:
            raise ValueError(f"RowTracking.park_seconds must be > 0, got {self.park_seconds!r}")

    def kwargs(self) -> dict:
        """The settings as keyword arguments of the C++ ``RowTracker`` / ``SuffixRowBatch``."""
        return dataclasses.asdict(self)


def native_settings(drafting: SuffixDrafting, calibration: SuffixCalibration) -> dict:
    """The C++ ``SuffixRowBatch``'s drafting and calibration keyword arguments for these options
    (``calibration.mode`` resolved, not None)."""
    if calibration.mode is None:
        raise ValueError("native_settings needs a resolved SuffixCalibration (mode not None)")
    return dict(min_match_len=drafting.min_match_len, min_prob=drafting.min_prob, max_depth=drafting.max_depth,
                depth_factor=drafting.depth_factor, count_prior=drafting.count_prior,
                global_count_prior=drafting.global_count_prior, rematch_window=drafting.rematch_window,
                combine_longest=drafting.combine == "longest", calibrate=calibration.mode != "off",
                learn=calibration.mode == "online", calibration_prior=calibration.prior)


class SuffixRowBatch:
    """A whole engine step's bookkeeping and drafting in one C++ call, under
    :class:`~specdec.proposers.suffix.SuffixProposer`'s rules (same trees; ended requests are filed
    by its ``index_ended`` under the default tenant). Each drafted row gets the tree's best path
    (largest summed node probability), at most ``k`` tokens. Requests live here, not in the proposer's
    table; the match calibration table is the batch's own (:attr:`match_calibration`)."""

    def __init__(self, proposer, *, tree_budget: int, tracking: RowTracking):
        if not isinstance(tree_budget, int) or tree_budget < 0:
            raise ValueError(f"tree_budget must be an int >= 0, got {tree_budget!r}")
        if not isinstance(tracking, RowTracking):
            raise TypeError(f"tracking must be a RowTracking, got {type(tracking).__name__}")
        self.proposer = proposer
        self.tree_budget = tree_budget
        self.tracking = tracking
        self._batch = load().SuffixRowBatch(proposer.vocab_size, tree_budget=tree_budget,
                                            **native_settings(proposer.drafting, proposer.calibration),
                                            **tracking.kwargs())

    def step(self, token_ids: np.ndarray, num_tokens: np.ndarray, num_sampled: np.ndarray, k: int,
             min_prob: float = 0.0, *, max_unseen: int = 0, now: float = 0.0, strict: bool = True):
        """One step over ``token_ids`` int32 ``[rows_max, stride]``, ``num_tokens`` (committed per row)
        and ``num_sampled [rows]``: ``(offsets int32[rows + 1], chains int32[total], probs
        float32[total])``, row ``r``'s chain at ``offsets[r]:offsets[r + 1]`` (empty when nothing was
        sampled, the row was refused, or ``k == 0``). ``min_prob``: stop before the first token below
        it. ``now``: the clock for ``park_seconds``. ``strict=False``: refuse a bad row alone (kind 3
        in :meth:`events`, :attr:`refusal`); with ``strict`` it raises and nothing changes.
        TypeError / ValueError for wrong dtype, shape or layout."""
        shared = self.proposer.shared_cache()
        out = self._batch.step(token_ids, num_tokens, num_sampled, int(k), None if shared is None else shared[0],
                               -1 if shared is None else shared[1], float(min_prob), int(max_unseen), float(now),
                               bool(strict))
        if self.proposer.keeps_ended:
            for rid in self._batch.ended():
                self.proposer.index_ended(*self._batch.request(rid))
        return out

    def events(self):
        """Per row of the last step: ``(ids, kinds, prompt_end, commit_begin, commit_end, drafted, accepted)``."""
        return self._batch.events()

    @property
    def refusal(self) -> str:
        """Why the last step's first refused row was refused ("" when none was)."""
        return self._batch.refusal

    @property
    def tracked(self) -> int:
        """Requests tracked (in a row last step, or parked until they come back or are ended)."""
        return self._batch.tracked

    @property
    def parked_tokens(self) -> int:
        """Tokens held by parked requests (bounded by ``tracking.max_parked_tokens``)."""
        return self._batch.parked_tokens

    @property
    def match_calibration(self):
        """The batch's :class:`MatchCalibration` table (live)."""
        return self._batch.calibration

    def memory_bytes(self) -> int:
        """Host bytes of the per-request automata and token copies (the global cache is the proposer's)."""
        return self._batch.memory_bytes()
