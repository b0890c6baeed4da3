"""Any specdec :class:`~specdec.Proposer` driven by engine batch rows, and the tree-to-chain rule.

Engines such as vLLM pass their drafter, once per step, ``token_ids [rows_max, stride]`` (int32),
each row's committed length and the tokens sampled this step, never a request id.
:class:`RowSession` matches rows to requests by content (``specdec._C.RowTracker``) and turns each
step into the proposer's calls, in this order: ``begin`` / ``commit`` row by row (exactly the tokens
the engine committed), then drafts, then ``end`` for requests out of the batch too long. Identity
rules: docs/vllm.md, "Request identity without request ids".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._ext import load
from ..proposers.suffix_rows import RowTracking
from ..tree import DraftTree

# Row kinds in the trackers' events (csrc/suffix/row_tracker.h, RowKind).
CONTINUED, NEW, RESUMED, REFUSED = 0, 1, 2, 3

SAMPLED_DRAFTS_REFUSED = (
    "the proposer drafted sampled (non-deterministic) tokens, but a chain-only engine gets no draft "
    "distribution q with them (vLLM passes draft_probs=None for custom_class drafters and treats every "
    "draft token as a point mass), so verifying them would bias the output; use a proposer whose drafts "
    "are deterministic (lookup, argmax)"
)


def best_chain(tree: DraftTree, probs, k: int, min_prob: float = 0.0) -> list[int]:
    """Tokens of the best root-to-leaf path of ``tree`` (largest sum of ``probs [n]``; ties: lower index),
    at most ``k`` deep, cut before its first node below ``min_prob``. ``probs=None`` only for a chain.
    ValueError for a branching tree without scores, or any sampled node (:data:`SAMPLED_DRAFTS_REFUSED`)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if not 0.0 <= min_prob <= 1.0:
        raise ValueError(f"min_prob must be in [0, 1], got {min_prob}")
    n = tree.num_nodes
    if n == 0 or k == 0:
        return []
    if not bool(tree.deterministic.all()):
        raise ValueError(SAMPLED_DRAFTS_REFUSED)
    parents = tree.parents.tolist()
    tokens = tree.tokens.tolist()
    if probs is None:
        if parents != list(range(-1, n - 1)):
            raise ValueError("a branching draft tree needs node scores (propose_scored) to choose its best path")
        return tokens[:k]
    scores = probs.tolist() if hasattr(probs, "tolist") else list(probs)
    out = []
    for i in load().best_path(parents, scores, int(k)):
        if scores[i] < min_prob:
            break
        out.append(tokens[i])
    return out


@dataclass(frozen=True)
class RowStep:
    """What one step did: per row the chain drafted; ``drafted`` / ``accepted``: tokens drafted for the
    rows' requests when last seen and how many the tokens committed since confirm; ``new`` /
    ``resumed`` / ``ended`` / ``refused``: counts of requests (rows) by what happened this step."""

    chains: list[list[int]]
    drafted: int
    accepted: int
    new: int
    resumed: int
    ended: int
    refused: int = 0


def _as_rows(num_sampled) -> np.ndarray:
    return np.ascontiguousarray(num_sampled, dtype=np.int32)


class RowSession:
    """Drives one specdec proposer from engine rows (see the module docstring).

    Args:
        proposer: begin/commit/end/propose(_scored) with an int ``vocab_size``; deterministic drafts.
        tree_budget: nodes requested per draft tree (the chain is chosen from it).
        tracking: how long a request out of the batch is kept.

    Raises:
        ValueError: a proposer that needs target hidden states (no engine row carries them).
    """

    def __init__(self, proposer, *, tree_budget: int = 16, tracking: RowTracking | None = None):
        if getattr(proposer, "requires_target_hidden", False):
            raise ValueError(f"{type(proposer).__name__} needs the target's hidden states, which batch rows do "
                             "not carry")
        if not isinstance(tree_budget, int) or tree_budget < 0:
            raise ValueError(f"tree_budget must be an int >= 0, got {tree_budget!r}")
        vocab = getattr(proposer, "vocab_size", None)
        if not isinstance(vocab, int):
            raise ValueError(f"{type(proposer).__name__} has no int vocab_size, needed to validate row token ids")
        self.proposer = proposer
        self.tree_budget = tree_budget
        self.tracking = tracking or RowTracking()
        self._tracker = load().RowTracker(vocab, **self.tracking.kwargs())
        self._scored = callable(getattr(proposer, "propose_scored", None))

    def step(self, token_ids: np.ndarray, num_tokens: np.ndarray, num_sampled, k: int,
             min_prob: float = 0.0, *, max_unseen: int = 0, now: float = 0.0, strict: bool = True) -> RowStep:
        """One engine step; rows that sampled tokens get a chain of at most ``k`` tokens (``k = 0``: none),
        cut before the first token whose estimated acceptance is below ``min_prob`` (scored proposers only).
        ``max_unseen`` / ``now`` / ``strict``: as :meth:`specdec.proposers.suffix_rows.SuffixRowBatch.step`."""
        sampled = _as_rows(num_sampled)
        self._tracker.step(token_ids, num_tokens, sampled, int(max_unseen), float(now), bool(strict))
        ids, kinds, prompt_end, begin, end, drafted, accepted = self._tracker.events()
        for r, rid in enumerate(ids.tolist()):
            if kinds[r] == REFUSED:
                continue
            row = token_ids[r]
            if kinds[r] == NEW:
                self.proposer.begin(rid, row[: prompt_end[r]].tolist())
            if end[r] > begin[r]:
                self.proposer.commit(rid, row[begin[r] : end[r]].tolist())
        chains: list[list[int]] = [[] for _ in range(len(ids))]
        want = [r for r in range(len(ids)) if sampled[r] > 0 and kinds[r] != REFUSED] if k > 0 else []
        if want:
            req_ids = [int(ids[r]) for r in want]
            if self._scored:
                drafts = [(d.tree, d.node_probs) for d in self.proposer.propose_scored(req_ids, self.tree_budget)]
            else:
                drafts = [(t, None) for t in self.proposer.propose(req_ids, self.tree_budget)]
            for r, (tree, probs) in zip(want, drafts):
                chains[r] = best_chain(tree, probs, k, min_prob)
        offsets = np.zeros(len(ids) + 1, dtype=np.int32)
        offsets[1:] = np.cumsum([len(c) for c in chains], dtype=np.int64)
        flat = np.array([t for c in chains for t in c], dtype=np.int32)
        self._tracker.record_drafts(offsets, flat)
        ended = self._tracker.ended()
        for rid in ended:
            self.proposer.end(rid)
        return RowStep(chains, int(drafted.sum()), int(accepted.sum()), int((kinds == NEW).sum()),
                       int((kinds == RESUMED).sum()), len(ended), int((kinds == REFUSED).sum()))

    def events(self):
        """Per row of the last step: ``(ids, kinds, prompt_end, commit_begin, commit_end, drafted, accepted)``."""
        return self._tracker.events()

    @property
    def refusal(self) -> str:
        """Why the last step's first refused row was refused ("" when none was)."""
        return self._tracker.refusal

    @property
    def tracked(self) -> int:
        return self._tracker.tracked
