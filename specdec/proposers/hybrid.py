"""Hybrid trees: one draft per step merging suffix-lookup candidates and EAGLE candidates.

Peers choose one proposer per step (ArcticInference) or let one override the other
(TensorRT-LLM). Here both draft every step and their candidates are merged into **one** tree,
ranked in one currency: each node's *calibrated* probability of being accepted.

* **Drafts.** The suffix proposer drafts from its automata (microseconds), the EAGLE proposer
  (EAGLE-1 or EAGLE-3 layer) from the target's features; each returns raw path estimates (lookup
  frequencies; draft-model path probabilities).
* **One currency.** Raw estimates err differently (lookup counts of contexts seen twice read as
  certain; a small draft layer is over- or under-confident by depth), so each source keeps its own
  :class:`~specdec.calibration.ScoreCalibration` (per-depth ratio of accepted to predicted). It is
  fed *in hindsight* at every commit: a drafted node would have been accepted exactly when its
  path is a prefix of the tokens the target emitted (the accepted draft plus the bonus token), so
  every drafted node up to that depth is evidence, whether or not the decoder verified it.
* **Merge.** Candidates are inserted into one trie by token path; a path both sources drafted
  keeps the larger calibrated estimate. Path estimates are non-increasing along every path, so
  the ``budget`` best nodes form a prefix-closed tree; the decoder then sizes it with its verify
  cost model (``propose_scored``; source ``"hybrid"``).
* **Exact.** Every node of both sources is deterministic (chosen, not sampled), so the merged
  tree verifies exactly at any temperature.

Where lookup matches long (extraction, summarisation, RAG) its calibrated estimates are near 1
and fill the tree; where it matches nothing it drafts nothing and EAGLE's nodes take the budget.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch

from ..checks import normalize_budgets
from ..calibration import ScoreCalibration
from ..tree import DraftTree
from .base import Artifact, ScoredDraft


class HybridProposer:
    """Suffix lookup + EAGLE drafting merged into one calibrated tree per step.

    Args:
        suffix: a :class:`~specdec.proposers.suffix.SuffixProposer`.
        eagle: an :class:`~specdec.proposers.eagle.EagleProposer` (EAGLE-1 or EAGLE-3 layer).
        calibration: factory of each source's :class:`ScoreCalibration` (defaults: the decoder's).
    """

    requires_target_hidden = True

    def __init__(self, suffix, eagle, *, calibration=ScoreCalibration):
        if getattr(suffix, "requires_target_hidden", False):
            raise ValueError("HybridProposer's lookup part must not need target hidden states (a SuffixProposer)")
        if not getattr(eagle, "requires_target_hidden", False) or not hasattr(eagle, "propose_scored"):
            raise ValueError("HybridProposer's model part must be a scored proposer reading target hidden states "
                             "(an EagleProposer)")
        if suffix.vocab_size != eagle.vocab_size:
            raise ValueError(f"suffix vocabulary {suffix.vocab_size} != EAGLE vocabulary {eagle.vocab_size}")
        self.suffix, self.eagle = suffix, eagle
        self.vocab_size = eagle.vocab_size
        self.target_layers = getattr(eagle, "target_layers", None)
        self.calibrations: dict[str, ScoreCalibration] = {}
        self._make_calibration = calibration
        self._last: dict[Hashable, list[tuple[str, list[tuple[int, ...]], list[float]]]] = {}
        a = eagle.artifact
        self.artifact = Artifact(name=f"hybrid:suffix+{a.name}", bound_to=a.bound_to, fingerprint=a.fingerprint,
                                 version=a.version, details={"parts": {"suffix": suffix.artifact.name,
                                                                       "eagle": a.name}, **a.details})

    # ------------------------------------------------------------------ lifecycle
    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None) -> None:
        self.eagle.begin(req_id, prompt_ids, tenant=tenant, target_hidden=target_hidden)
        try:
            self.suffix.begin(req_id, prompt_ids, tenant=tenant)
        except Exception:
            self.eagle.end(req_id)
            raise
        self._last[req_id] = []

    def commit(self, req_id, accepted_ids, *, target_hidden=None) -> None:
        drafts = self._state(req_id)
        self.eagle.commit(req_id, accepted_ids, target_hidden=target_hidden)
        self.suffix.commit(req_id, accepted_ids)
        emitted = tuple(int(t) for t in (accepted_ids.tolist() if isinstance(accepted_ids, torch.Tensor)
                                         else accepted_ids))
        for source, paths, probs in drafts:
            self._learn(source, paths, probs, emitted)
        self._last[req_id] = []

    def end(self, req_id) -> None:
        self._state(req_id)
        del self._last[req_id]
        self.suffix.end(req_id)
        self.eagle.end(req_id)

    def memory_bytes(self) -> int:
        return self.suffix.memory_bytes() + self.eagle.memory_bytes()

    def _state(self, req_id):
        if req_id not in self._last:
            raise KeyError(f"unknown request {req_id!r}: call begin() first")
        return self._last[req_id]

    # ------------------------------------------------------------------ calibration
    def calibration(self, source: str) -> ScoreCalibration:
        if source not in self.calibrations:
            self.calibrations[source] = self._make_calibration()
        return self.calibrations[source]

    def _learn(self, source: str, paths: list[tuple[int, ...]], probs: list[float], emitted: tuple[int, ...]) -> None:
        """Hindsight evidence: nodes no deeper than the emitted tokens are observed; the accepted
        depth is the longest drafted path that is a prefix of them."""
        seen = [(p, len(path)) for path, p in zip(paths, probs) if len(path) <= len(emitted)]
        if not seen:
            return
        accepted = max((len(path) for path in paths if len(path) <= len(emitted)
                        and path == emitted[: len(path)]), default=0)
        cal = self.calibration(source)
        cal.update([p for p, _ in seen], [d for _, d in seen], accepted)
        cal.tick()

    # ------------------------------------------------------------------ drafting
    def propose(self, req_ids: Sequence[Hashable], budget) -> list[DraftTree]:
        return [d.tree for d in self.propose_scored(req_ids, budget)]

    @torch.no_grad()
    def propose_scored(self, req_ids: Sequence[Hashable], budget) -> list[ScoredDraft]:
        budgets = normalize_budgets(req_ids, budget)
        for r in req_ids:
            self._state(r)
        lookups = self.suffix.propose_scored(req_ids, budgets)
        models = self.eagle.propose_scored(req_ids, budgets)
        out = []
        for req_id, b, look, model in zip(req_ids, budgets, lookups, models):
            parts = [(f"suffix:{look.source or 'none'}", look), ("eagle", model)]
            record, candidates = [], {}
            for source, draft in parts:
                paths = _paths(draft.tree)
                raw = draft.node_probs.tolist()
                cal = self.calibration(source).apply(raw, [len(p) for p in paths])
                record.append((source, paths, raw))
                for path, c in zip(paths, cal):
                    if c > candidates.get(path, -1.0):
                        candidates[path] = c
            self._last[req_id] = record
            out.append(_merge(candidates, b, self.vocab_size))
        return out


def _paths(tree: DraftTree) -> list[tuple[int, ...]]:
    """Every node's token path from the root (parents precede children)."""
    toks, par = tree.tokens.tolist(), tree.parents.tolist()
    out: list[tuple[int, ...]] = []
    for t, p in zip(toks, par):
        out.append((out[p] if p >= 0 else ()) + (t,))
    return out


def _merge(candidates: dict[tuple[int, ...], float], budget: int, vocab_size: int) -> ScoredDraft:
    """The ``budget`` best paths (ties: shorter, then lexicographic) as one tree, parents first."""
    best = sorted(candidates.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))[:budget]
    chosen = {path for path, _ in best}
    # An estimate can tie its parent; keep the kept set prefix-closed regardless.
    chosen = {path for path in chosen if all(path[:d] in chosen for d in range(1, len(path)))}
    order = sorted(chosen, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(order)}
    tokens = torch.tensor([p[-1] for p in order], dtype=torch.long)
    parents = torch.tensor([index[p[:-1]] if len(p) > 1 else -1 for p in order], dtype=torch.int32)
    probs = torch.tensor([candidates[p] for p in order], dtype=torch.float32)
    tree = DraftTree.trusted(tokens, parents, torch.ones(len(order), dtype=torch.bool), vocab_size=vocab_size)
    return ScoredDraft(tree, probs, float(probs.sum()), "hybrid")
