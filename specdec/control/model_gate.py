"""Whether a hybrid's model part is worth drafting this step, learned in hindsight.

A hybrid tree drafts from lookup (microseconds) and from a model (an EAGLE layer: about 10-16 ms a
step on this CPU, a fifth of a verify step). Where lookup already drafts well (extraction,
summaries of the prompt) the model's nodes rarely add an accepted token, and its drafting time is
then a tax on every step. :class:`ModelGate` decides per request and step, before the model runs:

* **What the model adds**, measured in hindsight at every commit where it drafted: the accepted
  depth of the merged tree minus that of the lookup's own paths (tokens; 0 when lookup alone would
  have done as well, negative when the model's nodes pushed accepted lookup nodes out of the tree).
  It is kept as a running mean per *bucket* of the lookup's calibrated expected acceptance at
  propose time (the sum of its candidates' estimates), since that is what the gate can see before
  drafting.
* **What the model costs**, in the same unit: its drafting seconds per request, plus the verify
  seconds of its nodes the decoder kept (when the hybrid is told them; the kept nodes lookup did not
  draft, priced by the decoder's cost curve), over the seconds between two propose calls (one
  decoding step), times the tokens the whole batch emits per step (drafting for one request delays
  every request of the step). On this CPU the verify part was a fifth of the drafting part (2.5 ms on 11.3 ms).
* **What this request adds beyond its bucket**: a running mean, per request, of its gain less its
  bucket's mean at the time (once that mean rests on ``min_samples`` gains), shrunk towards 0 by
  ``request_prior`` pseudo-observations. The bucket
  sees only the lookup side; whether the model predicts this text (prose it has learned, or code
  it has not) is a property of the request, and its own drafts measure it.
* The model drafts unless its bucket has ``min_samples`` observations and the bucket's mean plus the
  request's shrunk residual is below the cost. A request skipped in a bucket still drafts on every
  ``explore_every``-th of its decisions there (counted per request and bucket, so one request
  drafting does not starve another's exploration), and a bucket or request that turned useful is
  found again.

The merged tree is credited with its accepted draft (the emitted tokens less the target's own last
one): a node the decoder's sizer cut earns no credit. Lookup's paths the merge offered are judged
the same way; those the model's nodes pushed out of the tree are judged against every emitted token,
since offered they would have been verified (``hybrid._gain``).

Exploration stays at a fixed one in ``explore_every``: a back-off (interval doubled after each
exploration that did not pay, up to 64) was measured on 2026-12-02 and taken out. The gain means
move only on explorations, so a bucket learned on extraction prompts kept skipping on writing
prompts, where EAGLE had added 0.4 tokens a step: the hybrid fell to suffix's tokens per step. A
back-off per request and bucket (reset by an exploration that paid) was measured on 2026-12-03 and
taken out too: 1.83x against 1.84x plain over 12 prompts, its saved drafting time (3.4 against 3.9 ms
a step) spent by the writing tokens it stopped finding (1.83 against 1.92 a step).

Exactness does not depend on it: it only chooses which deterministic nodes are offered. Its
decisions depend on measured time, as the decoder's sizing does (a bit-reproducible run passes
``HybridProposer(..., model_gate=None)``).
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable

from ..estimate.calibration import RunningMean


@dataclass
class ModelGate:
    """Per-step draft/skip decisions for a hybrid's model part (see the module docstring).

    Attributes:
        edges: bucket edges on the lookup's expected accepted tokens (strictly increasing).
        min_samples: observations a bucket needs before it may skip.
        explore_every: a skipping bucket still drafts on every this-many-th decision.
        weight: floor of the running means' step size (older evidence fades).
        request_prior: pseudo-observations a request's own residual is shrunk by (0 trusts one draft
            fully; ``math.inf``: the bucket's mean alone).
        charge_verify: count the verify time of the model's kept nodes in its price (False: drafting
            time alone, the gate before 2026-12-03, kept for same-run comparisons).
        clock: seconds (``time.perf_counter``; tests pass a fake).
    """

    edges: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    min_samples: int = 4
    explore_every: int = 8
    weight: float = 0.05
    request_prior: float = 4.0
    charge_verify: bool = True
    clock: Callable[[], float] = time.perf_counter
    drafted: int = 0
    skipped: int = 0
    _model: RunningMean = field(default_factory=RunningMean)  # drafting seconds per request (the first one is warm-up)
    _verify: RunningMean = field(default_factory=RunningMean)  # verify seconds of the model's kept nodes
    _period: RunningMean = field(default_factory=RunningMean)  # seconds between propose calls
    _warm: bool = False
    _last_call: float | None = None
    _tokens: dict[Hashable, RunningMean] = field(default_factory=dict)  # req_id -> tokens emitted per step
    _gain: list[RunningMean] = field(default_factory=list)  # [bucket] hindsight gain, tokens
    _residual: dict[Hashable, RunningMean] = field(default_factory=dict)  # req_id -> gain less its bucket's mean
    _skips: dict[tuple[Hashable, int], int] = field(default_factory=dict)  # (req_id, bucket) -> skips since a draft

    def __post_init__(self):
        if any(b <= a for a, b in zip(self.edges, self.edges[1:])):
            raise ValueError(f"ModelGate edges must be strictly increasing, got {self.edges}")
        if self.min_samples < 1 or self.explore_every < 1 or not 0 < self.weight <= 1 or not self.request_prior >= 0:
            raise ValueError("ModelGate needs min_samples >= 1, explore_every >= 1, weight in (0, 1] "
                             "and request_prior >= 0")
        self._gain = [RunningMean() for _ in range(len(self.edges) + 1)]

    @property
    def gain(self) -> list[float]:
        """Mean hindsight gain per bucket, in tokens (0 where nothing was observed)."""
        return [0.0 if m.value is None else m.value for m in self._gain]

    @property
    def samples(self) -> list[int]:
        """Observations per bucket."""
        return [m.n for m in self._gain]

    @property
    def model_seconds(self) -> float | None:
        """Mean drafting seconds per request (None until measured)."""
        return self._model.value

    @property
    def verify_seconds(self) -> float:
        """Mean verify seconds of the model's kept nodes per drafted request (0 until observed)."""
        return self._verify.value or 0.0

    @property
    def period(self) -> float | None:
        """Mean seconds between propose calls (None until two calls)."""
        return self._period.value

    def bucket(self, expected: float) -> int:
        """The bucket of a lookup draft whose calibrated estimates sum to ``expected``."""
        return bisect.bisect_right(self.edges, expected)

    def step_started(self) -> None:
        """A propose call began: the time since the previous one is one decoding step."""
        now = self.clock()
        if self._last_call is not None:
            gap = now - self._last_call
            # A gap spanning a prefill or an idle engine is not a step: clipped to twice the mean,
            # so it cannot inflate the period (and hide the model's cost), while a real rise
            # (a larger batch) still doubles it within a few steps.
            self._period.add(gap if self.period is None else min(gap, 2 * self.period), self.weight)
        self._last_call = now

    def batch_tokens(self, req_ids) -> float:
        """Tokens the requests of a step emit per step, by their running means (1 before any)."""
        return sum(1.0 if self._tokens.get(r) is None else self._tokens[r].value for r in req_ids)

    def cost_tokens(self, batch_tokens: float) -> float | None:
        """One request's model price (drafting plus the verify of its kept nodes) in tokens of a step
        that emits ``batch_tokens``, or None before the drafting time is known."""
        if self.model_seconds is None or not self.period:
            return None
        return (self.model_seconds + self.verify_seconds) / self.period * batch_tokens

    def expected_gain(self, bucket: int, req_id: Hashable = None) -> float | None:
        """Tokens the model is expected to add for ``req_id`` in ``bucket``: the bucket's mean plus the
        request's residual, shrunk by ``request_prior``; None before the bucket has ``min_samples``."""
        mean = self._gain[bucket]
        if mean.n < self.min_samples:
            return None
        own = self._residual.get(req_id)
        if own is None:
            return mean.value
        return mean.value + own.n / (own.n + self.request_prior) * own.value

    def should_draft(self, bucket: int, batch_tokens: float, req_id: Hashable = None) -> bool:
        """Draft the model for ``req_id`` in ``bucket`` now, in a step emitting ``batch_tokens``?
        (Counts the decision.)"""
        cost = self.cost_tokens(batch_tokens)
        expected = self.expected_gain(bucket, req_id)
        worth = cost is None or expected is None or expected >= cost
        key = (req_id, bucket)
        explore = not worth and self._skips.get(key, 0) + 1 >= self.explore_every
        if worth or explore:
            self._skips.pop(key, None)
            self.drafted += 1
            return True
        self._skips[key] = self._skips.get(key, 0) + 1
        self.skipped += 1
        return False

    def observe_model_time(self, seconds: float) -> None:
        """One request's drafting time. The first is dropped: a cold first forward (and a first step
        asked for the full budget) ran long, and a skipping bucket draws too rarely to outweigh it."""
        if self._warm:
            self._model.add(seconds, self.weight)
        self._warm = True

    def observe_verify_time(self, seconds: float) -> None:
        """Verify seconds the decoder spent on the model's kept nodes in one drafted request's step
        (ignored with ``charge_verify=False``)."""
        if not seconds >= 0:
            raise ValueError(f"verify time must be >= 0 s, got {seconds}")
        if self.charge_verify:
            self._verify.add(seconds, self.weight)

    def observe(self, req_id: Hashable, bucket: int | None, gain: float | None, emitted: int) -> None:
        """One commit: ``emitted`` tokens; ``gain`` (tokens) when the model drafted this step."""
        self._tokens.setdefault(req_id, RunningMean()).add(float(emitted), self.weight)
        if bucket is not None and gain is not None:
            mean = self._gain[bucket]
            # A residual against a mean of fewer than min_samples gains would be mostly that mean's own
            # noise, and it would stay in the request's residual long after the bucket settled.
            if mean.n >= self.min_samples:
                self._residual.setdefault(req_id, RunningMean()).add(gain - mean.value, self.weight)
            mean.add(gain, self.weight)

    def end(self, req_id: Hashable) -> None:
        self._tokens.pop(req_id, None)
        self._residual.pop(req_id, None)
        for key in [k for k in self._skips if k[0] == req_id]:
            del self._skips[key]
