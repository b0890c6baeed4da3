"""Hybrid trees: one draft per step merging suffix-lookup candidates and EAGLE candidates.

Both sources draft every step and their candidates merge into one tree ranked by calibrated
acceptance probability. Each source (suffix lookup; EAGLE-1/3) keeps its own
:class:`~specdec.estimate.calibration.ScoreCalibration`, fed in hindsight at every commit (a drafted
node would have been accepted iff its path is a prefix of the emitted tokens). Candidates merge into
one trie by token path (the larger estimate wins); estimates never increase along a path, so the
``budget`` best nodes are prefix-closed (source ``"hybrid"`` for the decoder's sizer). All nodes are
point masses: exact at any temperature. A :class:`~specdec.control.model_gate.ModelGate` skips EAGLE
for a request and step when its hindsight gain over lookup is below its price in tokens (drafting
time plus the verify time of its kept nodes); ``model_gate=None`` always drafts both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Sequence

import torch

from ..checks import normalize_budgets
from ..estimate.calibration import ScoreCalibration
from ..tree import DraftTree
from .base import Artifact, ScoredDraft
from ..control.interface import BatchView, Outcome
from ..control.model_gate import ModelGate


@dataclass
class _Step:
    """A request's last draft, for its commit: each source's paths and raw estimates, the paths offered,
    the gate's bucket (None: model did not draft), the kept model nodes' verify cost (None: unknown)."""

    sources: list[tuple[str, list[tuple[int, ...]], list[float]]] = field(default_factory=list)
    lookup_paths: list[tuple[int, ...]] = field(default_factory=list)
    offered: list[tuple[int, ...]] = field(default_factory=list)
    bucket: int | None = None
    verify_extra: float | None = None  # seconds the verify spends on the model's kept nodes (observe_sized)


class HybridProposer:
    """Suffix lookup + EAGLE drafting merged into one calibrated tree per step.

    Args:
        suffix: a :class:`~specdec.proposers.suffix.SuffixProposer`.
        eagle: an :class:`~specdec.proposers.eagle.EagleProposer` (EAGLE-1 or EAGLE-3 layer).
        calibration: factory of each source's :class:`ScoreCalibration` (defaults: the decoder's).
        model_gate: a :class:`ModelGate` deciding per request and step whether EAGLE drafts
            (default: a new one), or None to draft both every step.
    """

    requires_target_hidden = True

    def __init__(self, suffix, eagle, *, calibration=ScoreCalibration, model_gate: ModelGate | None | str = "auto"):
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
        if not (model_gate is None or model_gate == "auto" or isinstance(model_gate, ModelGate)):
            raise ValueError(f"model_gate must be 'auto', None or a ModelGate, got {model_gate!r}")
        self.model_gate = ModelGate() if model_gate == "auto" else model_gate
        self._last: dict[Hashable, _Step] = {}
        self._model_drafted: set[Hashable] = set()  # requests the gated model has drafted for
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
        self._last[req_id] = _Step()

    def commit(self, req_id, accepted_ids, *, target_hidden=None) -> None:
        step = self._state(req_id)
        self.eagle.commit(req_id, accepted_ids, target_hidden=target_hidden)
        self.suffix.commit(req_id, accepted_ids)
        emitted = tuple(int(t) for t in (accepted_ids.tolist() if isinstance(accepted_ids, torch.Tensor)
                                         else accepted_ids))
        for source, paths, probs in step.sources:
            self._learn(source, paths, probs, emitted)
        if self.model_gate is not None and step.sources:
            gain = None if step.bucket is None else _gain(step, emitted)
            self.model_gate.observe(Outcome.of(
                [0], [0], details={req_id: (step.bucket, gain, len(emitted))},
                timings={} if step.verify_extra is None else {"verify": step.verify_extra}))
        self._last[req_id] = _Step()

    def end(self, req_id) -> None:
        self._state(req_id)
        del self._last[req_id]
        self._model_drafted.discard(req_id)
        try:
            if self.model_gate is not None:
                self.model_gate.end(req_id)
            self.suffix.end(req_id)
        finally:  # the model part's state is freed even when the lookup part's end raises
            self.eagle.end(req_id)

    def memory_bytes(self) -> int:
        return self.suffix.memory_bytes() + self.eagle.memory_bytes()

    def _state(self, req_id):
        if req_id not in self._last:
            raise KeyError(f"unknown request {req_id!r}: call begin() first")
        return self._last[req_id]

    def observe_sized(self, req_id, tree: DraftTree, cost) -> None:
        """The decoder kept ``tree`` (``cost``: its verify-cost curve); when the model drafted, the gate
        is charged ``cost(kept) - cost(kept lookup nodes)`` on top of the drafting time."""
        step = self._state(req_id)
        if step.bucket is None or self.model_gate is None:
            return
        lookup = set(step.lookup_paths)
        kept = _paths(tree)
        own = sum(p in lookup for p in kept)
        step.verify_extra = max(0.0, cost.cost(len(kept)) - cost.cost(own))

    # ------------------------------------------------------------------ calibration
    def calibration(self, source: str) -> ScoreCalibration:
        if source not in self.calibrations:
            self.calibrations[source] = self._make_calibration()
        return self.calibrations[source]

    def _learn(self, source: str, paths: list[tuple[int, ...]], probs: list[float], emitted: tuple[int, ...]) -> None:
        """Hindsight evidence: nodes up to the emitted depth; accepted depth = longest prefix path."""
        seen = [(p, len(path)) for path, p in zip(paths, probs) if len(path) <= len(emitted)]
        if not seen:
            return
        cal = self.calibration(source)
        cal.update([p for p, _ in seen], [d for _, d in seen], _accepted(paths, emitted))
        cal.tick()

    # ------------------------------------------------------------------ drafting
    def propose(self, req_ids: Sequence[Hashable], budget) -> list[DraftTree]:
        return [d.tree for d in self.propose_scored(req_ids, budget)]

    @torch.no_grad()
    def propose_scored(self, req_ids: Sequence[Hashable], budget) -> list[ScoredDraft]:
        budgets = normalize_budgets(req_ids, budget)
        for r in req_ids:
            self._state(r)
        steps, expected = [], {}
        for req_id, b, look in zip(req_ids, budgets, self.suffix.propose_scored(req_ids, budgets)):
            step, candidates = _Step(), {}
            self._add(step, candidates, f"suffix:{look.source or 'none'}", look)
            step.lookup_paths = list(candidates)
            steps.append((step, candidates))
            expected[req_id] = sum(sorted(candidates.values(), reverse=True)[:b])
        wanted = [r for r, b in zip(req_ids, budgets) if b > 0]
        gate = self.model_gate
        if gate is not None and wanted:  # which requests' model part is worth its price this step
            decision = gate.decide(BatchView(len(wanted), req_ids=tuple(wanted), cap=max(budgets), hints=expected))
            wanted = [r for r, n in zip(wanted, decision.per_request) if n > 0]
        model = set(wanted)
        out = []
        for req_id, b, (step, candidates) in zip(req_ids, budgets, steps):
            if req_id in model:
                self._add(step, candidates, "eagle", self._model_draft(req_id, b))
                step.bucket = None if gate is None else gate.bucket(expected[req_id])
            draft, step.offered = _merge(candidates, b, self.vocab_size)
            self._last[req_id] = step
            out.append(draft)
        return out

    def _model_draft(self, req_id: Hashable, budget: int) -> ScoredDraft:
        """EAGLE's draft for one request, timed for the gate."""
        if self.model_gate is None:
            return self.eagle.propose_scored([req_id], [budget])[0]
        if req_id not in self._model_drafted:
            # A request's first draft would feed its whole prompt (up to MAX_QUEUED pairs) through the
            # layer: a cost of the request, not of this step, so it is paid before the clock starts.
            # Later drafts keep their feed of the steps since in the price: one pass over a few rows,
            # which every draft adds and every skip saves.
            self.eagle.feed_queued(req_id)
            self._model_drafted.add(req_id)
        t0 = self.model_gate.clock()
        (draft,) = self.eagle.propose_scored([req_id], [budget])
        self.model_gate.observe(Outcome.of([0], [0], timings={"model": self.model_gate.clock() - t0}))
        return draft

    def _add(self, step: _Step, candidates: dict[tuple[int, ...], float], source: str, draft: ScoredDraft) -> None:
        """Record one source's draft and merge its calibrated paths into ``candidates`` (larger wins)."""
        paths = _paths(draft.tree)
        raw = draft.node_probs.tolist()
        step.sources.append((source, paths, raw))
        for path, c in zip(paths, self.calibration(source).apply(raw, [len(p) for p in paths])):
            if c > candidates.get(path, -1.0):
                candidates[path] = c


def _gain(step: _Step, emitted: tuple[int, ...]) -> int:
    """Accepted tokens the model's nodes added over lookup's in one step (negative when they displaced
    better lookup nodes). Offered lookup paths count against the accepted draft only (the sizer cut
    the rest); lookup paths pushed out of the tree count against every emitted token."""
    accepted = emitted[:-1]
    offered = set(step.offered)
    kept = [p for p in step.lookup_paths if p in offered]
    pushed_out = [p for p in step.lookup_paths if p not in offered]
    lookup = max(_accepted(kept, accepted), _accepted(pushed_out, emitted))
    return _accepted(step.offered, accepted) - lookup


def _accepted(paths: Sequence[tuple[int, ...]], emitted: tuple[int, ...]) -> int:
    """The longest of ``paths`` that is a prefix of the emitted tokens: what a tree holding them
    would have accepted (the emitted tokens are the accepted draft plus the target's own)."""
    return max((len(p) for p in paths if len(p) <= len(emitted) and p == emitted[: len(p)]), default=0)


def _paths(tree: DraftTree) -> list[tuple[int, ...]]:
    """Every node's token path from the root (parents precede children)."""
    toks, par = tree.tokens.tolist(), tree.parents.tolist()
    out: list[tuple[int, ...]] = []
    for t, p in zip(toks, par):
        out.append((out[p] if p >= 0 else ()) + (t,))
    return out


def _merge(candidates: dict[tuple[int, ...], float], budget: int, vocab_size: int
           ) -> tuple[ScoredDraft, list[tuple[int, ...]]]:
    """The ``budget`` best paths (ties: shorter, then lexicographic) as one tree, parents first,
    and those paths in node order."""
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
    return ScoredDraft(tree, probs, float(probs.sum()), "hybrid"), order
