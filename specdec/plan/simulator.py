"""Discrete-event simulation of a continuous-batching server with optional speculation.

Whether speculation pays depends on load (queueing, batch, memory), so a workload is replayed against
a measured cost model and measured acceptance. Server model (iteration-level, as vLLM/Orca): FCFS
admission while the KV cache holds prompt + whole output + the policy's largest draft (+ proposer
memory per token; reserving the output stands in for paging and preemption) and the batch is under
``max_batch``. An iteration either prefills all newly admitted requests in one padded forward, or runs
one decode step: the policy picks a budget ``k``; each drafting request drafts ``d`` and accepts
``a <= d``, drawn from its category's histograms truncated at ``k`` (one coupled uniform); the step
costs ``t_target(B, 1 + max d, context)`` plus drafting time and emits ``1 + a`` tokens per request.
``scheduler="packed"`` (vLLM V1) instead runs prefill chunks inside decode steps within
``max_batched_tokens`` (chunked prefill), charged by :meth:`StepCostModel.packed_step_time`.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Mapping, Sequence

import numpy as np

from ..estimate.acceptance import AcceptanceDist
from ..estimate.step_cost import StepCostModel
from .goodput import RequestRecord
from ..control.interface import BatchView, Outcome
from .policies import Policy
from .workload import SimRequest


@dataclasses.dataclass
class ServerConfig:
    """What the simulated server is made of.

    Attributes:
        cost: target step-time model; ``cost_off``: the one never-drafting policies run on (None:
            ``cost``; vLLM with a ``custom_class`` drafter turns async scheduling off);
            ``cost_no_draft``: the one a drafting policy's steps run on when it chose K = 0 (None:
            ``cost``; a vLLM schedule's K = 0 steps cost off's times a measured tax, not what the
            drafting steps' fit extrapolates to).
        acceptance: one distribution, or one per category (missing ones fall back to ``"all"``).
        kv_capacity_tokens: KV tokens that fit with the proposer loaded (None: unlimited);
            ``kv_capacity_tokens_off``: without it (default: the same). See :mod:`specdec.plan.memory`.
        proposer_token_overhead: proposer bytes per cached token / target KV bytes per token.
        max_batch: cap on running requests (None: memory only). ``seed``: acceptance draws.
        padded_context: charge the longest context in the batch (right-padded cache), else the mean.
        scheduler: ``"phased"`` or ``"packed"``; ``max_batched_tokens``: the packed step's token
            budget (None: unlimited; decode rows first, prefill chunks fill the rest).
    """

    cost: StepCostModel
    acceptance: AcceptanceDist | Mapping[str, AcceptanceDist]
    kv_capacity_tokens: int | None = None
    kv_capacity_tokens_off: int | None = None
    proposer_token_overhead: float = 0.0
    max_batch: int | None = None
    seed: int = 0
    padded_context: bool = False
    scheduler: str = "phased"
    max_batched_tokens: int | None = None
    cost_off: StepCostModel | None = None
    cost_no_draft: StepCostModel | None = None

    def scaled(self, factor: float) -> "ServerConfig":
        """The same server with every target step ``factor`` times as long (:meth:`StepCostModel.scaled`;
        the policies' drafting time is not scaled)."""
        off, none = (None if c is None else c.scaled(factor) for c in (self.cost_off, self.cost_no_draft))
        return dataclasses.replace(self, cost=self.cost.scaled(factor), cost_off=off, cost_no_draft=none)

    def cost_for(self, policy: Policy) -> StepCostModel:
        """The step-time model ``policy`` runs on (``cost_off`` for one that never drafts, when given)."""
        return self.cost_off if self.cost_off is not None and not policy.uses_proposer else self.cost

    def step_cost(self, policy: Policy, k: int) -> StepCostModel:
        """The model of one decode step in which ``policy`` chose ``k`` draft tokens."""
        if k == 0 and policy.uses_proposer and self.cost_no_draft is not None:
            return self.cost_no_draft
        return self.cost_for(policy)

    def __post_init__(self):
        if self.scheduler not in ("phased", "packed"):
            raise ValueError(f"scheduler must be 'phased' or 'packed', got {self.scheduler!r}")
        if self.max_batched_tokens is not None and self.max_batched_tokens < 1:
            raise ValueError(f"max_batched_tokens must be >= 1 or None, got {self.max_batched_tokens}")
        if self.max_batch is not None and self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1 or None, got {self.max_batch}")
        for name in ("kv_capacity_tokens", "kv_capacity_tokens_off"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {v}")
        if self.proposer_token_overhead < 0:
            raise ValueError(f"proposer_token_overhead must be >= 0, got {self.proposer_token_overhead}")

    def dist_for(self, category: str) -> AcceptanceDist:
        if isinstance(self.acceptance, AcceptanceDist):
            return self.acceptance
        if category in self.acceptance:
            return self.acceptance[category]
        if "all" in self.acceptance:
            return self.acceptance["all"]
        raise ValueError(
            f"no acceptance distribution for category {category!r} (have {sorted(self.acceptance)}) and no 'all' "
            "fallback"
        )


@dataclasses.dataclass
class SimResult:
    """Per-request records plus server-side counters of one simulated run."""

    records: list[RequestRecord]
    busy_s: float
    decode_steps: int
    mean_batch: float
    max_batch: int
    drafted: int
    accepted: int
    switches: int


@dataclasses.dataclass
class _Running:
    req: SimRequest
    reserved: float
    generated: int
    context: int
    first: float


class _Sampler:
    """Draws ``(drafted, accepted)`` per request-step from cached CDFs; one uniform feeds both inverse
    CDFs, which keeps ``accepted <= drafted``."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self._cdf: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def draw(self, dist: AcceptanceDist, budget: int) -> tuple[int, int]:
        if budget == 0:
            return 0, 0
        key = (id(dist), budget)
        cdfs = self._cdf.get(key)
        if cdfs is None:
            cdfs = (np.cumsum(dist.drafted_pmf(budget)), np.cumsum(dist.pmf(budget)))
            for c in cdfs:
                c[-1] = 1.0
            self._cdf[key] = cdfs
        u = self.rng.random()
        d = int(np.searchsorted(cdfs[0], u, side="right"))
        a = int(np.searchsorted(cdfs[1], u, side="right"))
        return max(d, a), a


def _prepare(reqs: Sequence[SimRequest], policy: Policy, server: ServerConfig):
    """``(cost, sampler, KV capacity, dists, need)`` for a run (resets ``policy``); ``need(request)``:
    KV tokens reserved on admission."""
    policy.reset()
    on = policy.uses_proposer
    capacity = server.kv_capacity_tokens if on else (server.kv_capacity_tokens_off or server.kv_capacity_tokens)
    overhead = server.proposer_token_overhead if on else 0.0
    reserve_draft = policy.max_budget
    dists = {r.item.category: server.dist_for(r.item.category) for r in reqs} if on else {}

    def need(r: SimRequest) -> float:
        return (r.item.prompt_len + r.item.output_len) * (1.0 + overhead) + reserve_draft

    return server.cost_for(policy), _Sampler(server.seed), capacity, dists, need


def _arrive(reqs: Sequence[SimRequest], nxt: int, t: float, waiting: collections.deque, *,
            idle: bool) -> tuple[float, int]:
    """Queue requests arrived by ``t`` (jumping to the next arrival when idle); returns the clock and
    the next request not yet arrived."""
    if idle and not waiting:
        t = max(t, reqs[nxt].arrival)
    while nxt < len(reqs) and reqs[nxt].arrival <= t:
        waiting.append(reqs[nxt])
        nxt += 1
    return t, nxt


def _never_fits(req: SimRequest, need: float, capacity: int) -> ValueError:
    return ValueError(f"request {req.rid} needs {need:.0f} KV tokens but the cache holds {capacity}: it can never be "
                      "admitted; raise the memory budget or shorten the workload")


def simulate(requests: Sequence[SimRequest], policy: Policy, server: ServerConfig) -> SimResult:
    """Run ``requests`` (sorted by arrival) through the server under ``policy``; see module docstring."""
    reqs = sorted(requests, key=lambda r: (r.arrival, r.rid))
    if not reqs:
        raise ValueError("simulate needs at least one request")
    if server.scheduler == "packed":
        return _simulate_packed(reqs, policy, server)
    cost, sampler, capacity, dists, need = _prepare(reqs, policy, server)
    reserve_draft = policy.max_budget
    prop_s = {c: d.propose_s_per_req for c, d in dists.items()}

    waiting: collections.deque[SimRequest] = collections.deque()
    running: list[_Running] = []
    records: list[RequestRecord] = []
    t = busy = 0.0
    reserved = 0.0
    nxt = steps = drafted_total = accepted_total = batch_sum = max_b = 0

    def finish(run: _Running) -> None:
        nonlocal reserved
        reserved -= run.reserved
        records.append(
            RequestRecord(
                run.req.rid, run.req.arrival, run.first, t, run.generated, run.req.item.category, run.req.opt_out
            )
        )

    while nxt < len(reqs) or waiting or running:
        t, nxt = _arrive(reqs, nxt, t, waiting, idle=not running)
        admitted: list[SimRequest] = []
        while waiting and (server.max_batch is None or len(running) + len(admitted) < server.max_batch):
            n = need(waiting[0])
            if capacity is not None and reserved + n > capacity:
                if not running and not admitted:
                    raise _never_fits(waiting[0], n, capacity)
                break
            reserved += n
            admitted.append(waiting.popleft())
        if admitted:
            dt = cost.prefill_time([r.item.prompt_len for r in admitted])
            t += dt
            busy += dt
            for r in admitted:
                run = _Running(r, need(r), 1, r.item.prompt_len + 1, t)
                if r.item.output_len <= 1:
                    finish(run)
                else:
                    running.append(run)
            continue
        if not running:
            continue
        B = len(running)
        contexts = [r.context for r in running]
        ctx = float(max(contexts) if server.padded_context else np.mean(contexts))
        k = int(policy.decide(BatchView(B, ctx)).budget)
        if not 0 <= k <= reserve_draft:
            raise ValueError(f"policy {policy!r} returned budget {k}, outside [0, {reserve_draft}] (its max_budget)")
        budgets = [0 if r.req.opt_out else k for r in running]
        draws = [sampler.draw(dists[r.req.item.category], b) if b else (0, 0) for r, b in zip(running, budgets)]
        width = max(d for d, _ in draws)
        dt = server.step_cost(policy, k).step_time(B, 1 + width, ctx)
        dt += sum(prop_s[r.req.item.category] for r, b in zip(running, budgets) if b > 0)
        t += dt
        busy += dt
        steps += 1
        batch_sum += B
        max_b = max(max_b, B)
        drafted = accepted = 0
        still: list[_Running] = []
        for run, (d, a) in zip(running, draws):
            drafted += d
            accepted += a
            emit = min(1 + a, run.req.item.output_len - run.generated)
            run.generated += emit
            run.context += emit
            if run.generated >= run.req.item.output_len:
                finish(run)
            else:
                still.append(run)
        running = still
        drafted_total += drafted
        accepted_total += accepted
        policy.observe(Outcome.of([drafted], [accepted]))
    return SimResult(
        records, busy, steps, batch_sum / steps if steps else 0.0, max_b, drafted_total, accepted_total, policy.switches
    )


@dataclasses.dataclass
class _Packed:
    req: SimRequest
    reserved: float
    prefilled: int = 0
    generated: int = 0
    first: float = 0.0


def _simulate_packed(reqs: list[SimRequest], policy: Policy, server: ServerConfig) -> SimResult:
    """The ``scheduler="packed"`` server of the module docstring; ``reqs`` sorted by arrival."""
    cost, sampler, capacity, dists, need = _prepare(reqs, policy, server)
    reserve_draft = policy.max_budget
    budget_tokens = server.max_batched_tokens
    waiting: collections.deque[SimRequest] = collections.deque()
    running: list[_Packed] = []  # admission order: prefill chunks are granted in this order
    records: list[RequestRecord] = []
    t = busy = reserved = 0.0
    nxt = steps = drafted_total = accepted_total = batch_sum = max_b = 0

    while nxt < len(reqs) or waiting or running:
        t, nxt = _arrive(reqs, nxt, t, waiting, idle=not running)
        while waiting and (server.max_batch is None or len(running) < server.max_batch):
            n = need(waiting[0])
            if capacity is not None and reserved + n > capacity:
                if not running:
                    raise _never_fits(waiting[0], n, capacity)
                break
            reserved += n
            running.append(_Packed(waiting.popleft(), n))
        decoding = [r for r in running if r.prefilled == r.req.item.prompt_len]
        ctx = float(np.mean([r.req.item.prompt_len + r.generated for r in decoding])) if decoding else 0.0
        k = int(policy.decide(BatchView(len(running), ctx)).budget) if decoding else 0
        if not 0 <= k <= reserve_draft:
            raise ValueError(f"policy {policy!r} returned budget {k}, outside [0, {reserve_draft}] (its max_budget)")
        draws = {id(r): sampler.draw(dists[r.req.item.category], 0 if r.req.opt_out else k) if k else (0, 0)
                 for r in decoding}
        pieces = [(1 + draws[id(r)][0], r.req.item.prompt_len + r.generated) for r in decoding]
        left = None if budget_tokens is None else budget_tokens - sum(n for n, _ in pieces)
        chunks: dict[int, int] = {}
        for r in running:
            todo = r.req.item.prompt_len - r.prefilled
            if todo and (left is None or left > 0):
                chunks[id(r)] = todo if left is None else min(todo, left)
                pieces.append((chunks[id(r)], r.prefilled))
                left = None if left is None else left - chunks[id(r)]
        dt = (server.step_cost(policy, k) if decoding else cost).packed_step_time(pieces)
        dt += sum(dists[r.req.item.category].propose_s_per_req for r in decoding if draws[id(r)][0] > 0)
        t += dt
        busy += dt
        drafted = accepted = 0
        still: list[_Packed] = []
        for r in running:
            if id(r) in chunks:
                r.prefilled += chunks[id(r)]
                if r.prefilled == r.req.item.prompt_len:
                    r.generated, r.first = 1, t
            elif id(r) in draws:
                d, a = draws[id(r)]
                drafted += d
                accepted += a
                r.generated += min(1 + a, r.req.item.output_len - r.generated)
            if r.generated >= r.req.item.output_len:
                reserved -= r.reserved
                records.append(RequestRecord(r.req.rid, r.req.arrival, r.first, t, r.generated, r.req.item.category,
                                             r.req.opt_out))
            else:
                still.append(r)
        running = still
        if decoding:
            steps += 1
            batch_sum += len(decoding)
            max_b = max(max_b, len(decoding))
            drafted_total += drafted
            accepted_total += accepted
            policy.observe(Outcome.of([drafted], [accepted]))
    return SimResult(records, busy, steps, batch_sum / steps if steps else 0.0, max_b, drafted_total, accepted_total,
                     policy.switches)
