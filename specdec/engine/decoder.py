"""SpeculativeDecoder: the propose -> verify -> accept -> commit loop over a batch of requests.

The loop is :meth:`SpeculativeDecoder.run` (``examples/custom_loop.py``: one request, no batching).
Requests progress raggedly and leave the batch when finished; without a proposer it is plain decoding.
One thread at a time per decoder (``RuntimeError`` otherwise); decoders may share one model.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Iterator, Sequence

import numpy as np
import torch

from ..checks import as_token_list
from ..proposers.base import SamplingAwareProposer, ScoredProposer, SizeObserver
from ..sampling.params import SamplingParams
from ..sampling.processors import GenerationSettings, RowProcessors
from ..sampling.rejection import accept_step
from ..tree import DraftTree
from ..verify.hf import HFTarget
from .metrics import RequestMetrics
from ..control.interface import BatchView, Outcome
from ..control.sizer import DraftSizer, Ticket, check_draft
from ..estimate.verify_cost import VerifyCostModel, curves_by_batch


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


@dataclass
class _Request:
    """One request while it runs: everything the loop keeps about it, in one place."""

    index: int
    req_id: Hashable
    prompt: list[int]
    metrics: RequestMetrics
    processors: RowProcessors | None = None  # the generation config's logits processors, if any
    sequence: list[int] = field(default_factory=list)  # prompt + emitted tokens (what processors read)
    begun: bool = False  # the proposer holds state for it (closed on every exit)
    tenant: Hashable | None = None  # the isolation domain of the proposer's shared state (Proposer.begin)


class SpeculativeDecoder:
    """Speculative decoding over a Hugging Face target with any :class:`~specdec.Proposer`.

    Args:
        target: a transformers causal LM or an :class:`HFTarget`.
        proposer: the drafter, or None for plain decoding through the same loop.
        max_budget: most draft nodes requested from the proposer per request and step.
        budget: ``"auto"`` (verify the cost-model-optimal number of nodes) or an int (verify at most
            that many nodes, no cost model: for experiments and tests).
        cost_model: a measured :class:`VerifyCostModel`, or several with distinct ``batch`` (one of them
            the one-row curve). None: the one-row curve is measured on first use, and each batch
            size's the first time that many rows run; given: never timed, a batch size without its
            own curve is estimated from the one-row curve (:meth:`VerifyCostModel.for_batch`).
        calibration_prefix: prefix length for that calibration.
        generation_config: the ``GenerationConfig`` to reproduce (default: the model's own): its
            logits processors are honoured exactly, its sampling defaults apply without ``sampling``,
            anything else that changes outputs is refused by name (:mod:`specdec.sampling.processors`).
        adapt: let the sizer learn while decoding (calibrations, live cost curve, drafting overhead).
            Exact either way; for bit-reproducible seeded runs give a ``cost_model`` (or int
            ``budget``), ``adapt=False`` and a proposer without cross-request learning or timing
            (``SuffixGlobalCache(freeze_global=True)``, ``HybridProposer(..., model_gate=None)``).
    """

    def __init__(self, target, proposer=None, *, max_budget: int = 64, budget: str | int = "auto",
                 cost_model: VerifyCostModel | Sequence[VerifyCostModel] | None = None, calibration_prefix: int = 256,
                 generation_config=None, adapt: bool = True):
        self.target = target if isinstance(target, HFTarget) else HFTarget(target)
        layers = getattr(proposer, "target_layers", None)  # an EAGLE-3 proposer reads fused hidden states
        if layers is not None and self.target.hidden_layers != tuple(layers):
            self.target = self.target.with_hidden_layers(layers)
        self.generation = GenerationSettings.from_model(self.target.model, generation_config)
        self.proposer = proposer
        self.sizer = DraftSizer(budget, max_budget, adapt=adapt)
        self.max_budget, self.budget = max_budget, budget
        self.cost_models = curves_by_batch(cost_model)  # batch size -> the curve given or measured
        self._measures_costs = cost_model is None
        self.calibration_prefix = calibration_prefix
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._owner: tuple[int, int] | None = None  # (thread id, runs open in it)

    # The sizer's learned state, under the names the decoder has always had.
    estimator = property(lambda self: self.sizer.estimator)
    calibrations = property(lambda self: self.sizer.calibrations)
    draft_overhead = property(lambda self: self.sizer.draft_overhead)
    live_cost = property(lambda self: self.sizer.live_cost)

    # ------------------------------------------------------------------ public API
    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int = 64, sampling: SamplingParams | None = None,
                 *, stop_tokens: int | Sequence[int] | None = None, generator: torch.Generator | None = None,
                 req_id: Hashable | None = None, tenant: Hashable | None = None) -> GenerationResult:
        """Decode one prompt; ``sampling`` None decodes as the generation config says (greedy unless it
        sets ``do_sample``), temperature 0 is greedy."""
        ids = None if req_id is None else [req_id]
        return self.generate_batch([prompt_ids], max_new_tokens, sampling, stop_tokens=stop_tokens,
                                   generator=generator, req_ids=ids, tenants=[tenant])[0]

    def generate_batch(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 64,
                       sampling: SamplingParams | None = None, *, stop_tokens: int | Sequence[int] | None = None,
                       generator: torch.Generator | None = None, req_ids: Sequence[Hashable] | None = None,
                       tenants: Sequence[Hashable | None] | None = None) -> list[GenerationResult]:
        """Decode a batch of prompts together (ragged progress); results in prompt order."""
        tokens: list[list[int]] = [[] for _ in prompts]
        results: list[GenerationResult | None] = [None] * len(prompts)
        for ev in self.run(prompts, max_new_tokens, sampling, stop_tokens=stop_tokens, generator=generator,
                           req_ids=req_ids, tenants=tenants):
            tokens[ev.index].extend(ev.tokens)
            if ev.finished:
                results[ev.index] = GenerationResult(tokens[ev.index], ev.finish_reason, ev.metrics)
        return results  # type: ignore[return-value]

    def stream(self, prompt_ids: Sequence[int], max_new_tokens: int = 64, sampling: SamplingParams | None = None,
               *, stop_tokens: int | Sequence[int] | None = None, generator: torch.Generator | None = None,
               req_id: Hashable | None = None, tenant: Hashable | None = None) -> Iterator[StepEvent]:
        """Yield one :class:`StepEvent` per step for a single prompt (the last has ``finished=True``)."""
        ids = None if req_id is None else [req_id]
        yield from self.run([prompt_ids], max_new_tokens, sampling, stop_tokens=stop_tokens, generator=generator,
                            req_ids=ids, tenants=[tenant])

    @property
    def cost_model(self) -> VerifyCostModel | None:
        """The one-row verify cost curve (None until given or measured)."""
        return self.cost_models.get(1)

    def ensure_cost_model(self, batch: int = 1) -> VerifyCostModel:
        """The verify cost curve of ``batch`` rows: the one given, else measured now (seconds; one row
        on first use, ``batch`` rows the first time that many run together), else (curves were given)
        estimated from the one-row curve. Given and measured curves are never modified: the sizer
        refines its own copies."""
        if self.cost_model is None:
            self.cost_models[1] = VerifyCostModel.calibrate(self.target, prefix_len=self.calibration_prefix)
        if batch > 1 and batch not in self.cost_models and self._measures_costs:
            self.cost_models[batch] = VerifyCostModel.calibrate(self.target, prefix_len=self.calibration_prefix,
                                                                batch=batch)
        for curve in self.cost_models.values():
            if curve.batch not in self.sizer.live_costs:
                self.sizer.set_cost(curve)
        return self.cost_model if batch == 1 else self.sizer.cost_for(batch)

    # ------------------------------------------------------------------ the loop
    def run(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 64, sampling: SamplingParams | None = None,
            *, stop_tokens: int | Sequence[int] | None = None, generator: torch.Generator | None = None,
            req_ids: Sequence[Hashable] | None = None, tenants: Sequence[Hashable | None] | None = None,
            processors: Sequence[RowProcessors | None] | None = None) -> Iterator[StepEvent]:
        """The loop; yields every request's tokens per step. ``req_ids``: proposer ids (default fresh);
        ``tenants``: isolation domains for state a proposer shares across requests (default: one);
        ``processors``: one :class:`~specdec.sampling.processors.RowProcessors` (or None) per prompt,
        used instead of the generation config's (``specdec.integrations.hf`` passes ``generate``'s)."""
        reqs = self._admit(prompts, req_ids, processors, tenants)
        limit, sampling, stops = _check_limit(max_new_tokens), self._sampling(sampling), self._stop_tokens(stop_tokens)
        self.target.check_room([len(r.prompt) for r in reqs], limit)
        speculate = self.proposer is not None and self.max_budget > 0
        if speculate and self.sizer.auto:
            self.ensure_cost_model(len(reqs))
        with self._in_use():
            try:
                t0 = time.perf_counter()
                state, logits, hidden = self.target.prefill([r.prompt for r in reqs])
                first = self._first_tokens(self._processed(logits.unsqueeze(1), reqs, None), sampling, generator)
                prefill_s = time.perf_counter() - t0
                for r, h in zip(reqs, hidden):
                    r.metrics.prefill_s = prefill_s
                    if speculate:
                        self._begin(r, h, sampling)
                self.target.set_pending(state, first)
                events = [self._emit(r, [tok], stops, limit) for r, tok in zip(reqs, first)]
                for r, ev, h in zip(reqs, events, hidden):
                    self._commit(r, ev, lambda: h[-1:], speculate)
                yield from events
                active = self._drop(state, reqs, events)
                while active:
                    t0 = time.perf_counter()  # 1. propose
                    trees, tickets = (self._propose(active, limit) if speculate
                                      else ([DraftTree.empty()] * len(active), None))
                    trees = self.target.fit_positions(state, trees)  # never past the model's last position
                    t1 = time.perf_counter()  # 2. verify
                    out = self.target.verify(state, trees)
                    t2 = time.perf_counter()  # 3. accept
                    logits = self._processed(out.logits, active, trees)
                    paths, emitted = accept_step(trees, logits, sampling, generator=generator)
                    events = [self._emit(r, toks, stops, limit) for r, toks in zip(active, emitted)]
                    for row, (r, ev, path) in enumerate(zip(active, events, paths)):  # 4. commit
                        r.metrics.record_step(trees[row].num_nodes, min(len(path), len(ev.tokens)))  # emitted only
                        self._commit(r, ev, lambda: out.hidden[row, [0] + [1 + i for i in path]], speculate)
                    self.target.commit(state, paths, [e[-1] for e in emitted], validate=False)
                    t3 = time.perf_counter()
                    self._account(active, trees, paths, tickets, speculate, t0, t1, t2, t3)
                    yield from events
                    active = self._drop(state, active, events)
            finally:
                for r in reqs:
                    self._end(r)

    # ------------------------------------------------------------------ steps
    def _admit(self, prompts, req_ids, processors=None, tenants=None) -> list[_Request]:
        """One :class:`_Request` per prompt, every prompt and id checked before any model work."""
        prompts = [_check_prompt(p, i, self.target.vocab_size) for i, p in enumerate(prompts)]
        if not prompts:
            raise ValueError("run needs at least one prompt")
        if req_ids is None:
            req_ids = [("specdec", next(self._ids)) for _ in prompts]
        elif len(req_ids) != len(prompts) or len(set(req_ids)) != len(req_ids):
            raise ValueError(f"req_ids must be {len(prompts)} distinct ids, one per prompt, got {list(req_ids)!r}")
        if processors is None:
            processors = [self.generation.for_request(len(p)) for p in prompts]
        elif len(processors) != len(prompts):
            raise ValueError(f"processors must hold one entry per prompt ({len(prompts)}), got {len(processors)}")
        if tenants is None:
            tenants = [None] * len(prompts)
        elif len(tenants) != len(prompts):
            raise ValueError(f"tenants must hold one entry per prompt ({len(prompts)}), got {len(tenants)}")
        return [
            _Request(i, req_id, p, RequestMetrics(), procs, list(p), tenant=tenant)
            for i, (p, req_id, procs, tenant) in enumerate(zip(prompts, req_ids, processors, tenants))
        ]

    def _begin(self, r: _Request, hidden: torch.Tensor, sampling: SamplingParams | None) -> None:
        """Open the request in the proposer (with hidden states / sampling if it reads them)."""
        extra = (
            {"sampling": sampling or SamplingParams(temperature=0)}
            if isinstance(self.proposer, SamplingAwareProposer) and self.proposer.accepts_sampling
            else {}
        )
        h = hidden if self.proposer.requires_target_hidden else None
        self.proposer.begin(r.req_id, r.prompt, tenant=r.tenant, target_hidden=h, **extra)
        r.begun = True

    def _commit(self, r: _Request, ev: StepEvent, hidden, speculate: bool) -> None:
        """Tell the proposer what was emitted (``hidden()`` only for proposers that read it)."""
        if speculate and not ev.finished:
            h = hidden() if self.proposer.requires_target_hidden else None
            self.proposer.commit(r.req_id, ev.tokens, target_hidden=h)

    def _end(self, r: _Request) -> None:
        """Close the request's proposer state (on finish, abandonment or error); its id is reusable."""
        if r.begun:
            r.begun = False
            self.proposer.end(r.req_id)
            self.sizer.end(r.req_id)

    def _propose(self, active: list[_Request], limit: int) -> tuple[list[DraftTree], list[Ticket | None]]:
        """Draft for every active request and keep what the sizer finds worth verifying (scored
        proposers' estimates, else per-depth rates). Nodes deeper than the tokens left minus one are
        never verified; a request with one token left is not drafted for."""
        ids = [r.req_id for r in active]
        depth = [limit - r.metrics.tokens - 1 for r in active]
        asks = self.sizer.decide(BatchView(len(ids), req_ids=tuple(ids))).budgets(len(ids))
        budgets = [b if d > 0 else 0 for b, d in zip(asks, depth)]
        budget = budgets[0] if len(set(budgets)) == 1 else budgets
        if isinstance(self.proposer, ScoredProposer):
            drafts = [(d.tree, d.node_probs.tolist(), d.source) for d in self.proposer.propose_scored(ids, budget)]
        else:
            drafts = [(t, None, "") for t in self.proposer.propose(ids, budget)]
        if len(drafts) != len(ids):
            raise ValueError(f"proposer returned {len(drafts)} trees for {len(ids)} requests")
        cut = []
        for b, d, (tree, probs, source) in zip(budgets, depth, drafts):
            check_draft(tree, probs, b)
            tree, keep = tree.cut(d)
            cut.append((tree, probs if keep is None or probs is None else [probs[i] for i in keep], source))
        sized = self.sizer.size_step([(req_id, tree, probs, source) for req_id, (tree, probs, source) in zip(ids, cut)])
        if isinstance(self.proposer, SizeObserver) and self.sizer.live_cost is not None:
            cost = self.sizer.cost_for(len(ids))
            for req_id, (_, probs, _), (tree, _) in zip(ids, cut, sized):
                if probs is not None:
                    self.proposer.observe_sized(req_id, tree, cost)
        return [t for t, _ in sized], [ticket for _, ticket in sized]

    def _first_tokens(self, logits: torch.Tensor, sampling: SamplingParams | None, generator) -> list[int]:
        """The token after each prompt, from the prefill logits ``[B, 1, V]``: an empty tree's root row."""
        empty = [DraftTree.empty(device=logits.device, vocab_size=logits.shape[-1])] * logits.shape[0]
        return [toks[0] for toks in accept_step(empty, logits, sampling, generator=generator)[1]]

    def _processed(self, logits: torch.Tensor, active: list[_Request], trees) -> torch.Tensor:
        """``logits [B, R, V]`` after the config's logits processors, each row in its own context."""
        if not any(r.processors for r in active):
            return logits
        out = logits.clone()
        for row, r in enumerate(active):
            if r.processors is not None:
                tree = trees[row] if trees is not None else DraftTree.empty()
                out[row] = r.processors.apply(logits[row], r.sequence, tree)
        return out

    def _emit(self, r: _Request, tokens: list[int], stops: frozenset[int], limit: int) -> StepEvent:
        """Cut ``tokens`` at a stop token or the length limit and record them."""
        room = limit - r.metrics.tokens
        reason = None
        for i, t in enumerate(tokens[:room]):
            if t in stops:
                tokens, reason = tokens[: i + 1], "stop"
                break
        else:
            if len(tokens) >= room:
                tokens, reason = tokens[:room], "length"
        r.metrics.tokens += len(tokens)
        r.sequence += tokens
        return StepEvent(
            index=r.index, tokens=list(tokens), finished=reason is not None, finish_reason=reason, metrics=r.metrics
        )

    def _account(self, active: list[_Request], trees: list[DraftTree], paths, tickets, speculate: bool,
                 t0, t1, t2, t3) -> None:
        """Tell the sizer the step's outcome (tickets and accepted paths; single-request steps refine its
        costs) and charge the step's phases to every request in it."""
        self.sizer.observe(Outcome.of(
            [t.num_nodes for t in trees], [len(p) for p in paths],
            details={r.req_id: (tickets[row], paths[row]) for row, r in enumerate(active)} if speculate else {},
            timings={"verify": t2 - t1, "accept": t3 - t2} if speculate else {}))
        for r in active:
            r.metrics.propose_s += t1 - t0
            r.metrics.verify_s += t2 - t1
            r.metrics.accept_s += t3 - t2

    def _drop(self, state, active: list[_Request], events: list[StepEvent]) -> list[_Request]:
        """Remove finished requests from the batch (cache rows and proposer state)."""
        keep = [row for row, ev in enumerate(events) if not ev.finished]
        for r, ev in zip(active, events):
            if ev.finished:
                self._end(r)
        if keep and len(keep) < len(active):
            self.target.select(state, keep)
        return [active[row] for row in keep]

    def _in_use(self):
        """Context manager marking this decoder busy in the current thread for the duration of a run."""
        return _InUse(self)

    def _sampling(self, sampling) -> SamplingParams | None:
        """The run's sampling: the generation config's own when None is given (None = greedy)."""
        return self.generation.sampling if sampling is None else _check_sampling(sampling)

    def _stop_tokens(self, stop_tokens) -> frozenset[int]:
        """``stop_tokens``, or the generation config's EOS ids (as ``model.generate`` uses) when None.

        Like Hugging Face's ``eos_token_id``: one int, or a sequence / 1-D tensor of ints (empty: no
        stop token). Anything else (a float, a bool, a string, a negative id) is refused by name.
        """
        given = self.generation.eos if stop_tokens is None else stop_tokens
        if isinstance(given, torch.Tensor):
            given = given.reshape(1) if given.dim() == 0 else given
        elif isinstance(given, (int, np.integer)) and not isinstance(given, (bool, np.bool_)):
            given = [given]
        elif isinstance(given, (str, bytes, bool, float)) or not isinstance(given, Iterable):
            raise TypeError(f"stop_tokens must be a token id or a sequence of token ids (as Hugging Face's "
                            f"eos_token_id), got {type(given).__name__} {given!r}")
        else:
            given = list(given)
        return frozenset(as_token_list(given, "stop_tokens"))


class _InUse:
    """A run holds its decoder for its thread (runs may interleave in one thread; another thread is refused)."""

    def __init__(self, decoder: SpeculativeDecoder):
        self.decoder = decoder

    def __enter__(self):
        d, me = self.decoder, threading.get_ident()
        with d._lock:
            if d._owner is not None and d._owner[0] != me:
                raise RuntimeError(
                    "this SpeculativeDecoder is running in another thread: use one decoder per "
                    "thread (decoders may share one model)"
                )
            d._owner = (me, 1 + (d._owner[1] if d._owner else 0))

    def __exit__(self, *exc):
        d = self.decoder
        with d._lock:
            thread, runs = d._owner
            d._owner = (thread, runs - 1) if runs > 1 else None


def _check_prompt(prompt, index: int, vocab_size: int) -> list[int]:
    if isinstance(prompt, (str, bytes)):
        raise TypeError(f"prompt {index} must be token ids, got {type(prompt).__name__}: tokenize it first")
    ids = as_token_list(prompt, f"prompt {index}", vocab_size)
    if not ids:
        raise ValueError(f"prompt {index} is empty: at least one token id is needed")
    return ids


def _check_limit(max_new_tokens) -> int:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    return max_new_tokens


def _check_sampling(sampling) -> SamplingParams | None:
    """None for greedy, else validated sampling params (anything else is refused)."""
    if not isinstance(sampling, SamplingParams):
        raise TypeError(
            f"sampling must be a specdec SamplingParams (temperature, top_k, top_p) or None, got "
            f"{type(sampling).__name__}: other logit processors cannot be verified exactly and are refused"
        )
    return None if sampling.greedy else sampling
