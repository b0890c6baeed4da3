"""SpeculativeDecoder: the propose -> verify -> accept -> commit loop over a batch of requests.

The whole loop is :meth:`SpeculativeDecoder.run`; everything else formats its events. One step:

1. **propose**: the proposer drafts a tree per active request (at most ``max_budget`` nodes); the
   cost model keeps the ``k`` nodes that maximise expected tokens per second (see
   :mod:`specdec.cost_model`).
2. **verify**: one target forward over every request's pending token + tree (:class:`HFTarget`).
3. **accept**: greedy (argmax walk) or exact rejection sampling (:func:`specdec.sampling.rejection_sample`)
   picks the accepted path and one bonus/recovery token; stop tokens and ``max_new_tokens`` cut it.
4. **commit**: the target's KV cache keeps the accepted rows; the proposer learns the emitted tokens.

Requests progress raggedly: each accepts its own number of tokens per step, and finished requests
leave the batch (their cache rows are dropped). Without a proposer the same loop is plain
decoding (empty trees), which is how the speed of the engine itself is measured.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace
from typing import Hashable, Iterator, Sequence

import torch

from .cost_model import (AcceptanceEstimator, DraftOverhead, RequestCalibration, ScoreCalibration, VerifyCostModel,
                         size_draft, size_scored_draft)
from .logits import SamplingParams
from .metrics import RequestMetrics
from .proposers.base import as_token_list
from .target.hf import HFTarget
from .tree import DraftTree


@dataclass
class GenerationResult:
    """One request's output: emitted token ids, why it stopped ("stop" or "length"), metrics."""

    tokens: list[int]
    finish_reason: str
    metrics: RequestMetrics


@dataclass
class StepEvent:
    """Tokens one request emitted in one step (``index`` = position in the prompt list)."""

    index: int
    tokens: list[int]
    finished: bool
    finish_reason: str | None
    metrics: RequestMetrics


class SpeculativeDecoder:
    """Speculative decoding over a Hugging Face target with any :class:`~specdec.Proposer`.

    Args:
        target: a transformers causal LM or an :class:`HFTarget`.
        proposer: the drafter, or None for plain decoding through the same loop.
        max_budget: most draft nodes requested from the proposer per request and step.
        budget: ``"auto"`` (verify the cost-model-optimal number of nodes) or an int (verify at most
            that many nodes, no cost model: for experiments and tests).
        cost_model: a measured :class:`VerifyCostModel`; calibrated on first use when None.
        calibration_prefix: prefix length for that calibration.
    """

    def __init__(self, target, proposer=None, *, max_budget: int = 64, budget: str | int = "auto",
                 cost_model: VerifyCostModel | None = None, calibration_prefix: int = 256):
        self.target = target if isinstance(target, HFTarget) else HFTarget(target)
        layers = getattr(proposer, "target_layers", None)  # an EAGLE-3 proposer reads fused hidden states
        if layers is not None and self.target.hidden_layers != tuple(layers):
            self.target = self.target.with_hidden_layers(layers)
        self.proposer = proposer
        if isinstance(max_budget, bool) or not isinstance(max_budget, int) or max_budget < 0:
            raise ValueError(f"max_budget must be an int >= 0, got {max_budget!r}")
        if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise ValueError(f"budget must be 'auto' or an int >= 0, got {budget!r}")
        self.max_budget = max_budget
        self.budget = budget
        self.cost_model = cost_model
        self.live_cost: VerifyCostModel | None = None
        self.calibration_prefix = calibration_prefix
        self.estimator = AcceptanceEstimator()
        self.draft_overhead = DraftOverhead()
        self.calibrations: dict[str, ScoreCalibration] = {}  # one per estimator (ScoredDraft.source)
        self._ids = itertools.count()

    # ------------------------------------------------------------------ public API
    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int = 64, sampling: SamplingParams | None = None,
                 *, stop_tokens: Sequence[int] | None = None, generator: torch.Generator | None = None,
                 req_id: Hashable | None = None) -> GenerationResult:
        """Decode one prompt; greedy when ``sampling`` is None or has temperature 0."""
        ids = None if req_id is None else [req_id]
        return self.generate_batch([prompt_ids], max_new_tokens, sampling, stop_tokens=stop_tokens,
                                   generator=generator, req_ids=ids)[0]

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 64,
                       sampling: SamplingParams | None = None, *, stop_tokens: Sequence[int] | None = None,
                       generator: torch.Generator | None = None,
                       req_ids: Sequence[Hashable] | None = None) -> list[GenerationResult]:
        """Decode a batch of prompts together (ragged progress); results in prompt order."""
        tokens: list[list[int]] = [[] for _ in prompts]
        results: list[GenerationResult | None] = [None] * len(prompts)
        for ev in self.run(prompts, max_new_tokens, sampling, stop_tokens=stop_tokens, generator=generator,
                           req_ids=req_ids):
            tokens[ev.index].extend(ev.tokens)
            if ev.finished:
                results[ev.index] = GenerationResult(tokens[ev.index], ev.finish_reason, ev.metrics)
        return results  # type: ignore[return-value]

    def stream(self, prompt_ids: Sequence[int], max_new_tokens: int = 64, sampling: SamplingParams | None = None,
               *, stop_tokens: Sequence[int] | None = None, generator: torch.Generator | None = None,
               req_id: Hashable | None = None) -> Iterator[StepEvent]:
        """Yield one :class:`StepEvent` per step for a single prompt (the last has ``finished=True``)."""
        ids = None if req_id is None else [req_id]
        yield from self.run([prompt_ids], max_new_tokens, sampling, stop_tokens=stop_tokens, generator=generator,
                            req_ids=ids)

    def ensure_cost_model(self) -> VerifyCostModel:
        """The verify cost model, measured now (a few seconds) if none was given.

        The decoder keeps its own copy (``live_cost``), which its single-request steps refine with
        their measured verify times; the given or calibrated model is never modified.
        """
        if self.cost_model is None:
            self.cost_model = VerifyCostModel.calibrate(self.target, prefix_len=self.calibration_prefix)
        if self.live_cost is None:
            self.live_cost = replace(self.cost_model, seconds=list(self.cost_model.seconds))
        return self.cost_model

    # ------------------------------------------------------------------ the loop
    def run(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 64, sampling: SamplingParams | None = None,
            *, stop_tokens: Sequence[int] | None = None, generator: torch.Generator | None = None,
            req_ids: Sequence[Hashable] | None = None) -> Iterator[StepEvent]:
        """The propose -> verify -> accept -> commit loop; yields every request's tokens per step.

        ``req_ids`` name the requests for the proposer (default: fresh unique ids).
        """
        prompts = [_check_prompt(p, i, self.target.vocab_size) for i, p in enumerate(prompts)]
        if not prompts:
            raise ValueError("run needs at least one prompt")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        sampling = _check_sampling(sampling)
        stops = self._stop_tokens(stop_tokens)
        speculate = self.proposer is not None and self.max_budget > 0
        if speculate and self.budget == "auto":
            self.ensure_cost_model()
        target, proposer = self.target, self.proposer

        metrics = [RequestMetrics() for _ in prompts]
        t0 = time.perf_counter()
        state, logits, hidden = target.prefill(prompts)
        if req_ids is None:
            req_ids = [("specdec", next(self._ids)) for _ in prompts]
        elif len(req_ids) != len(prompts) or len(set(req_ids)) != len(req_ids):
            raise ValueError(f"req_ids must be {len(prompts)} distinct ids, one per prompt, got {list(req_ids)!r}")
        first = self._first_tokens(logits, sampling, generator)
        prefill_s = time.perf_counter() - t0
        active = list(range(len(prompts)))
        # Requests whose proposer state is open: closed on every exit (finished, a consumer that
        # stops iterating, an exception), so a req_id can be reused afterwards.
        begun: set = set()
        request_cals: dict = {}  # (req_id, source) -> RequestCalibration, while the request runs
        try:
            for b in active:
                metrics[b].prefill_s = prefill_s
                if speculate:
                    h = hidden[b] if proposer.requires_target_hidden else None
                    proposer.begin(req_ids[b], prompts[b], target_hidden=h)
                    begun.add(req_ids[b])
            target.set_pending(state, first)
            produced = [0] * len(prompts)
            finished_rows = []
            for row, b in enumerate(active):
                ev = self._emit(b, [first[row]], produced, metrics, stops, max_new_tokens)
                if speculate and not ev.finished:
                    h = hidden[b][-1:] if proposer.requires_target_hidden else None
                    proposer.commit(req_ids[b], ev.tokens, target_hidden=h)
                finished_rows += [row] if ev.finished else []
                yield ev
            active = self._drop(state, active, finished_rows, req_ids, begun)

            while active:
                # 1. propose
                t0 = time.perf_counter()
                if speculate:
                    trees, predicted = self._propose([req_ids[b] for b in active], request_cals)
                else:
                    trees, predicted = [DraftTree.empty()] * len(active), [None] * len(active)
                t1 = time.perf_counter()
                # 2. verify
                out = target.verify(state, trees)
                t2 = time.perf_counter()
                # 3. accept
                paths, emitted = self._accept(out.logits, trees, sampling, generator)
                # 4. commit
                events, finished_rows = [], []
                for row, b in enumerate(active):
                    metrics[b].record_step(trees[row].num_nodes, len(paths[row]))
                    if speculate:
                        self.estimator.update(trees[row], len(paths[row]))
                        if predicted[row] is not None:
                            raw, cal = predicted[row]
                            cal.update(raw, trees[row]._depth_list, len(paths[row]))
                    ev = self._emit(b, emitted[row], produced, metrics, stops, max_new_tokens)
                    if ev.finished:
                        finished_rows.append(row)
                        for key in [k for k in request_cals if k[0] == req_ids[b]]:
                            del request_cals[key]
                    elif speculate:
                        h = None
                        if proposer.requires_target_hidden:
                            h = out.hidden[row, [0] + [1 + i for i in paths[row]]]
                        proposer.commit(req_ids[b], emitted[row], target_hidden=h)
                    events.append(ev)
                target.accept(state, paths, [e[-1] for e in emitted], out.logits.shape[1] - 1)
                for cal in itertools.chain(self.calibrations.values(), request_cals.values()):
                    cal.tick()
                t3 = time.perf_counter()
                if speculate and self.live_cost is not None and len(active) == 1:
                    self.live_cost.observe(trees[0].num_nodes, t2 - t1)
                    self.draft_overhead.observe(trees[0].num_nodes > 0, t3 - t2)
                for b in active:
                    metrics[b].propose_s += t1 - t0
                    metrics[b].verify_s += t2 - t1
                    metrics[b].accept_s += t3 - t2
                yield from events
                active = self._drop(state, active, finished_rows, req_ids, begun)
        finally:
            for req_id in begun:
                proposer.end(req_id)

    # ------------------------------------------------------------------ steps
    def _propose(self, req_ids: list[Hashable], request_cals: dict
                 ) -> tuple[list[DraftTree], list[tuple[list[float], ScoreCalibration] | None]]:
        """Draft, then keep the cost-optimal part of each deterministic tree.

        Node path probabilities come from the proposer when it offers ``propose_scored`` (as the
        suffix proposer does: ``ScoredDraft(tree, node_probs)``), scaled by how well its past
        estimates matched real acceptance (:class:`ScoreCalibration`), else from this decoder's
        running per-depth acceptance rates for the proposer. Each estimator the proposer names
        (``ScoredDraft.source``) has its own calibration: one over-confident cache must not shrink
        another's good estimates, and each request has its own, shrunk toward its source's
        (:class:`RequestCalibration`, kept in ``request_cals`` by ``(req_id, source)`` for the
        request's lifetime). Returns the trees to verify and, for scored proposers, the proposer's
        own (unscaled) estimates of each kept tree's nodes with the calibration to update.
        """
        # A fixed int budget caps what is drafted: sampled trees cannot be pruned afterwards
        # (dropping sampled siblings would change the law they were drawn under).
        ask = self.max_budget if self.budget == "auto" else min(self.max_budget, self.budget)
        scored = getattr(self.proposer, "propose_scored", None)
        if scored is not None:
            drafts = [(d.tree, d.node_probs.tolist(), d.source) for d in scored(req_ids, ask)]
        else:
            drafts = [(t, None, "") for t in self.proposer.propose(req_ids, ask)]
        if len(drafts) != len(req_ids):
            raise ValueError(f"proposer returned {len(drafts)} trees for {len(req_ids)} requests")
        out, predicted = [], []
        for req_id, (tree, probs, source) in zip(req_ids, drafts):
            if not isinstance(tree, DraftTree):
                raise TypeError(f"proposer returned a {type(tree).__name__}, expected DraftTree")
            if tree.num_nodes > ask:
                raise ValueError(f"proposer returned {tree.num_nodes} nodes over the budget {ask}")
            if probs is not None and len(probs) != tree.num_nodes:
                raise ValueError(f"proposer scored {len(probs)} nodes for a tree of {tree.num_nodes}")
            if probs is not None and not all(0.0 <= p <= 1.0 for p in probs):  # False for NaN too
                bad = next(p for p in probs if not 0.0 <= p <= 1.0)
                raise ValueError(f"proposer scored a node {bad}: acceptance estimates must be probabilities in [0, 1]")
            if not tree.num_nodes:
                out.append(tree)
                predicted.append(None)
                continue
            # With an int budget the proposer was asked for at most that many nodes: nothing to prune.
            if probs is None:  # no estimates: this decoder's per-depth acceptance rates
                if self.budget == "auto":
                    tree, _ = size_draft(tree, self.estimator.path_probs(tree), self.live_cost,
                                         self.draft_overhead.seconds)
                out.append(tree)
                predicted.append(None)
                continue
            cal = request_cals.get((req_id, source))
            if cal is None:
                cal = request_cals[(req_id, source)] = RequestCalibration(shared=self._calibration(source))
            if self.budget == "auto":
                tree, probs = size_scored_draft(tree, probs, cal, self.live_cost, self.draft_overhead.seconds)
            out.append(tree)
            predicted.append((probs, cal))
        return out, predicted

    def _calibration(self, source: str) -> "ScoreCalibration":
        """The acceptance calibration of one estimator (created on first use)."""
        if source not in self.calibrations:
            self.calibrations[source] = ScoreCalibration()
        return self.calibrations[source]

    def _first_tokens(self, logits: torch.Tensor, sampling: SamplingParams | None, generator) -> list[int]:
        """The token after each prompt, from the prefill logits ``[B, V]``."""
        if sampling is None:
            return _checked_argmax(logits).tolist()
        from .sampling import verify_logits

        empty = [DraftTree.empty(device=logits.device, vocab_size=logits.shape[-1])] * logits.shape[0]
        # [B, 1, V]: an empty tree's root row
        return [int(r.tokens[0]) for r in verify_logits(empty, logits.unsqueeze(1), sampling, generator=generator)]

    def _accept(self, logits: torch.Tensor, trees: Sequence[DraftTree], sampling: SamplingParams | None, generator):
        """Accepted node paths and emitted tokens per request from verify logits ``[B, 1 + N, V]``."""
        paths, emitted = [], []
        if sampling is None:
            sizes = torch.tensor([1 + t.num_nodes for t in trees], device=logits.device)
            best = _checked_argmax(logits, sizes).tolist()  # [B][1 + N]
            for row, tree in enumerate(trees):
                path, toks = _greedy_walk(tree, best[row])
                paths.append(path)
                emitted.append(toks)
            return paths, emitted
        from .sampling import verify_logits

        # Proposers may draft on the CPU while the target runs elsewhere: the sampler needs one device.
        trees = [t if t.device == logits.device else t.to(logits.device) for t in trees]
        # One call: processes the logits (refusing NaN / inf) and verifies against that processed
        # distribution without re-validating it. Padded rows past a tree's n + 1 are never read.
        for res in verify_logits(trees, logits, sampling, generator=generator):
            paths.append(res.path.tolist())
            emitted.append(res.tokens.tolist())
        return paths, emitted

    def _emit(self, b, tokens, produced, metrics, stops, max_new_tokens) -> StepEvent:
        """Cut ``tokens`` at a stop token or the length limit and record them."""
        room = max_new_tokens - produced[b]
        reason = None
        for i, t in enumerate(tokens[:room]):
            if t in stops:
                tokens, reason = tokens[: i + 1], "stop"
                break
        else:
            if len(tokens) >= room:
                tokens, reason = tokens[:room], "length"
        produced[b] += len(tokens)
        metrics[b].tokens += len(tokens)
        return StepEvent(index=b, tokens=list(tokens), finished=reason is not None, finish_reason=reason, metrics=metrics[b])

    def _drop(self, state, active, finished_rows, req_ids, begun: set) -> list[int]:
        """Remove finished requests from the batch (cache rows and proposer state)."""
        if not finished_rows:
            return active
        done = set(finished_rows)
        for row in finished_rows:
            req_id = req_ids[active[row]]
            if req_id in begun:
                begun.discard(req_id)
                self.proposer.end(req_id)
        keep = [row for row in range(len(active)) if row not in done]
        if keep:
            self.target.select(state, keep)
        return [active[row] for row in keep]

    def _stop_tokens(self, stop_tokens) -> frozenset[int]:
        """``stop_tokens``, or the model's EOS ids (as ``model.generate`` uses) when None."""
        if stop_tokens is None:
            eos = getattr(getattr(self.target.model, "generation_config", None), "eos_token_id", None)
            stop_tokens = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        out = frozenset(int(t) for t in stop_tokens)
        if any(t < 0 for t in out):
            raise ValueError(f"stop_tokens must be non-negative token ids, got {sorted(out)}")
        return out


def _greedy_walk(tree: DraftTree, best: list[int]) -> tuple[list[int], list[int]]:
    """Follow the target's argmax through the tree: ``best[0]`` after the root, ``best[1 + i]``
    after node i. Returns (accepted node path, emitted tokens = path tokens + one target token)."""
    tokens = tree.tokens.tolist()
    path, emitted, node = [], [], -1
    while True:
        want = best[0 if node < 0 else 1 + node]
        emitted.append(want)
        child = next((c for c in tree.children_of(node) if tokens[c] == want), None)
        if child is None:
            return path, emitted
        path.append(child)
        node = child


def _check_prompt(prompt, index: int, vocab_size: int) -> list[int]:
    if isinstance(prompt, (str, bytes)):
        raise TypeError(f"prompt {index} must be token ids, got {type(prompt).__name__}: tokenize it first")
    ids = as_token_list(prompt, f"prompt {index}", vocab_size)
    if not ids:
        raise ValueError(f"prompt {index} is empty: at least one token id is needed")
    return ids


def _checked_argmax(logits: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Greedy choice over the last dim of ``[B, V]`` or ``[B, R, V]`` logits.

    NaN logits raise (argmax would silently pick a NaN slot). ``rows[b]`` limits the check to the
    first rows of request ``b``: rows past a tree's size are padding and never read. torch's argmax
    propagates NaN (a row holding one returns a NaN slot), so checking the chosen logits finds every
    NaN row without a second full pass over ``[B, R, V]``.
    """
    best = logits.argmax(-1)
    nan = torch.isnan(logits.gather(-1, best.unsqueeze(-1)).squeeze(-1))
    if rows is not None:
        nan &= torch.arange(logits.shape[1], device=logits.device).unsqueeze(0) < rows.unsqueeze(1)
    if bool(nan.any()):
        raise ValueError("the target produced NaN logits: greedy decoding cannot choose a token")
    return best


def _check_sampling(sampling) -> SamplingParams | None:
    """None for greedy, else validated sampling params (anything else is refused)."""
    if sampling is None:
        return None
    if not isinstance(sampling, SamplingParams):
        raise TypeError(
            f"sampling must be a specdec SamplingParams (temperature, top_k, top_p) or None, got "
            f"{type(sampling).__name__}: other logit processors cannot be verified exactly and are refused"
        )
    return None if sampling.greedy else sampling
