"""``specdec plan``: measure, simulate every policy at every load, and recommend a setting per pool.

Per pool and proposer the policy whose worst goodput ratio to the best policy at each load is highest
wins (ties to the simpler: off, gated, adaptive, always). Speculation is recommended only when it loses
at most 2% goodput at every load and gains ``min_gain`` goodput or ``min_tpot_gain`` lower median TPOT
somewhere; otherwise off, since a proposer that does not clearly pay still costs an artifact to keep.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

from ..estimate.acceptance import AcceptanceDist
from ..estimate.step_cost import StepCostModel
from ..control.load_gate import BudgetOptimizer
from .memory import ProposerMemory, admitted_concurrency
from .policies import AlwaysOn, Off, adaptive, gated, hysteresis_band
from .pools import GateSpec, Pool
from .simulator import ServerConfig
from .sweep import capacity_rps, sweep
from .workload import WorkloadItem

POLICY_ORDER = ("off", "gated", "adaptive", "always")
DEFAULT_FRACTIONS = (0.05, 0.15, 0.3, 0.5, 0.7, 0.85, 1.0, 1.15)


@dataclasses.dataclass
class PlanSettings:
    """Simulation settings of a plan."""

    memory_budget_bytes: int
    max_budget: int = 8
    n_requests: int = 200
    load_fractions: Sequence[float] = DEFAULT_FRACTIONS
    replications: int = 2
    seed: int = 0
    min_gain: float = 0.03
    min_tpot_gain: float = 0.10
    max_batch: int | None = None
    scheduler: str = "phased"  # "packed": the engine mixes prefill chunks into decode steps (vLLM V1)
    max_batched_tokens: int | None = None  # the packed engine's token budget per step
    cost_off: StepCostModel | None = None  # the engine without a drafter, when it runs differently (vLLM)
    cost_band: float = 0.0  # also simulate with step costs x (1 +- cost_band): goodput_lo / goodput_hi per row

    def __post_init__(self):
        if self.memory_budget_bytes <= 0:
            raise ValueError(f"memory budget must be > 0 bytes, got {self.memory_budget_bytes}")
        if self.max_budget < 1:
            raise ValueError(f"max_budget must be >= 1, got {self.max_budget}")
        if not self.load_fractions or min(self.load_fractions) <= 0:
            raise ValueError(f"load fractions must be positive, got {list(self.load_fractions)}")
        if not 0 <= self.cost_band < 1:
            raise ValueError(f"cost_band must be in [0, 1), got {self.cost_band}")


@dataclasses.dataclass
class ProposerPlan:
    """Simulation outcome for one pool x proposer."""

    proposer: str
    budget: int
    threshold: int
    on_below: int
    admitted_off: int
    admitted_on: int
    rows: list[dict]
    chosen_policy: str
    worst_ratio: dict[str, float]
    best_gain: float
    tpot_gain: float


@dataclasses.dataclass
class PoolPlan:
    pool: Pool
    capacity_rps: float
    proposers: list[ProposerPlan]
    recommended: Pool
    verdict: str


def server_for(cost: StepCostModel, acceptance: Mapping[str, AcceptanceDist], items: Sequence[WorkloadItem], *,
               memory_budget_bytes: int, weights_bytes: int, kv_bytes_token: int, proposer_memory: ProposerMemory,
               max_budget: int, max_batch: int | None, seed: int, scheduler: str = "phased",
               max_batched_tokens: int | None = None,
               cost_off: StepCostModel | None = None) -> tuple[ServerConfig, int, int]:
    """The simulated server plus admitted concurrency without / with the proposer loaded."""
    mean_tokens = float(np.mean([i.prompt_len + i.output_len for i in items]))
    free_off = memory_budget_bytes - weights_bytes
    free_on = free_off - proposer_memory.fixed_bytes
    if free_on <= 0:
        raise ValueError(f"memory budget {memory_budget_bytes} B leaves no room for the KV cache after weights "
                         f"({weights_bytes} B) and the proposer ({proposer_memory.fixed_bytes} B)")
    off = admitted_concurrency(memory_budget_bytes, weights_bytes=weights_bytes, kv_bytes_token=kv_bytes_token,
                               tokens_per_seq=mean_tokens)
    on = admitted_concurrency(memory_budget_bytes, weights_bytes=weights_bytes, kv_bytes_token=kv_bytes_token,
                              tokens_per_seq=mean_tokens, proposer=proposer_memory, draft_budget=max_budget)
    server = ServerConfig(cost, dict(acceptance), kv_capacity_tokens=int(free_on // kv_bytes_token),
                          kv_capacity_tokens_off=int(free_off // kv_bytes_token),
                          proposer_token_overhead=proposer_memory.bytes_per_token / kv_bytes_token,
                          max_batch=max_batch, seed=seed, scheduler=scheduler,
                          max_batched_tokens=max_batched_tokens, cost_off=cost_off)
    return server, off.sequences, on.sequences


def by_rate_and_policy(rows: Sequence[dict], key: str | None = None) -> dict[float, dict[str, object]]:
    """``{rate: {policy: row[key]}}`` (whole rows when ``key`` is None) from a sweep's rows."""
    out: dict[float, dict[str, object]] = {}
    for r in rows:
        out.setdefault(r["rate"], {})[r["policy"]] = r if key is None else r[key]
    return out


def choose(rows: Sequence[dict]) -> tuple[str, dict[str, float]]:
    """The policy whose worst goodput ratio to the best policy at each load is highest."""
    by_rate = by_rate_and_policy(rows, "goodput_rps")
    worst = {}
    for p in POLICY_ORDER:
        ratios = []
        for g in by_rate.values():
            if p not in g:
                break
            best = max(g.values())
            ratios.append(1.0 if best <= 0 else g[p] / best)
        else:
            worst[p] = min(ratios)
    if not worst:
        raise ValueError("no policy was simulated at every load level")
    top = max(worst.values())
    chosen = next(p for p in POLICY_ORDER if p in worst and worst[p] >= top - 1e-3)
    return chosen, worst


def plan_proposer(pool: Pool, spec: str, acceptance: Mapping[str, AcceptanceDist], memory: ProposerMemory,
                  cost: StepCostModel, items: Sequence[WorkloadItem], rates: Sequence[float], settings: PlanSettings,
                  weights_bytes: int, kv_bytes_token: int) -> ProposerPlan:
    """Sweep off / always / gated / adaptive for one proposer in one pool."""
    server, adm_off, adm_on = server_for(cost, acceptance, items, memory_budget_bytes=settings.memory_budget_bytes,
                                         weights_bytes=weights_bytes, kv_bytes_token=kv_bytes_token,
                                         proposer_memory=memory, max_budget=settings.max_budget,
                                         max_batch=settings.max_batch, seed=settings.seed,
                                         scheduler=settings.scheduler, max_batched_tokens=settings.max_batched_tokens,
                                         cost_off=settings.cost_off)
    context = float(np.mean([i.prompt_len + i.output_len / 2 for i in items]))
    opt = BudgetOptimizer(cost, acceptance["all"], min(settings.max_budget, acceptance["all"].max_budget))
    budget, _ = opt.best(1, context)
    budget = max(1, budget)
    threshold = tune_threshold(items, server, rates, settings, pool.slo, budget, opt.crossover_batch(budget, context))
    band = hysteresis_band(threshold)
    policies = {"off": Off(), "always": AlwaysOn(budget), "adaptive": adaptive(opt)}
    if threshold >= 1:
        policies["gated"] = gated(threshold, budget, band)
    rows = sweep(items, policies, server, rates, settings.n_requests, pool.slo, settings.seed,
                 replications=settings.replications, cost_band=settings.cost_band)
    for r in rows:
        r["proposer"] = spec
    chosen, worst, gains = recommend_policy(rows, settings)
    return ProposerPlan(spec, budget, threshold, band, adm_off, adm_on, rows, chosen, worst, *gains)


def recommend_policy(rows: Sequence[dict], settings: PlanSettings) -> tuple[str, dict[str, float], tuple[float, float]]:
    """``(policy, worst goodput ratio per policy, its (goodput gain, TPOT reduction) over off)``; a
    speculative policy within 2% everywhere that buys ``min_gain`` or ``min_tpot_gain`` wins a tie."""
    chosen, worst = choose(rows)
    gains = {p: policy_gains(rows, p) for p in worst}
    if chosen == "off":
        paying = [p for p in POLICY_ORDER if p != "off" and p in worst and worst[p] >= 0.98
                  and (gains[p][0] >= settings.min_gain or gains[p][1] >= settings.min_tpot_gain)]
        if paying:
            chosen = max(paying, key=lambda p: (round(worst[p], 2), gains[p][1], gains[p][0]))
    return chosen, worst, gains[chosen]


def policy_gains(rows: Sequence[dict], policy: str) -> tuple[float, float]:
    """``(best goodput gain, best median-TPOT reduction)`` of ``policy`` over "off" across load levels."""
    by_rate = by_rate_and_policy(rows)
    gains, tpot_gains = [], []
    for g in by_rate.values():
        if g["off"]["goodput_rps"] > 0:
            gains.append(g[policy]["goodput_rps"] / g["off"]["goodput_rps"] - 1.0)
        if g["off"]["tpot_p50"] > 0:
            tpot_gains.append(1.0 - g[policy]["tpot_p50"] / g["off"]["tpot_p50"])
    return max(gains, default=0.0), max(tpot_gains, default=0.0)


def plan_pool(pool: Pool, measured: Mapping[str, tuple[Mapping[str, AcceptanceDist], ProposerMemory]],
              cost: StepCostModel, items: Sequence[WorkloadItem], settings: PlanSettings, weights_bytes: int,
              kv_bytes_token: int) -> PoolPlan:
    """Plan one pool: every candidate proposer (or only the pool's own, when it names one)."""
    candidates = [pool.proposer] if pool.proposer else list(measured)
    missing = [c for c in candidates if c not in measured]
    if missing:
        raise ValueError(f"pool {pool.name!r} names proposer(s) {missing} that were not measured; measured: "
                         f"{sorted(measured)}")
    probe_acc, probe_mem = measured[candidates[0]] if candidates else (None, ProposerMemory())
    if probe_acc is None:
        raise ValueError(f"pool {pool.name!r}: no candidate proposers to plan")
    server, _, _ = server_for(
        cost,
        probe_acc,
        items,
        memory_budget_bytes=settings.memory_budget_bytes,
        weights_bytes=weights_bytes,
        kv_bytes_token=kv_bytes_token,
        proposer_memory=probe_mem,
        max_budget=settings.max_budget,
        max_batch=settings.max_batch,
        seed=settings.seed,
        scheduler=settings.scheduler,
        max_batched_tokens=settings.max_batched_tokens,
        cost_off=settings.cost_off,
    )
    cap = capacity_rps(items, server, seed=settings.seed)
    rates = [f * cap for f in settings.load_fractions]
    plans = [
        plan_proposer(pool, c, *measured[c], cost, items, rates, settings, weights_bytes, kv_bytes_token)
        for c in candidates
    ]
    good = [
        p
        for p in plans
        if p.chosen_policy != "off"
        and p.worst_ratio.get(p.chosen_policy, 0) >= 0.98
        and (p.best_gain >= settings.min_gain or p.tpot_gain >= settings.min_tpot_gain)
    ]
    if not good:
        rec = dataclasses.replace(pool, policy="off", proposer=None, gate=None)
        verdict = (
            f"do not speculate: no proposer gains {settings.min_gain:.0%} goodput or {settings.min_tpot_gain:.0%} "
            f"median time per token at any load without losing more than 2% goodput at another"
        )
        return PoolPlan(pool, cap, plans, rec, verdict)
    best = max(good, key=lambda p: (round(p.worst_ratio[p.chosen_policy], 2), p.best_gain, p.tpot_gain))
    gate = (
        GateSpec(best.threshold, best.on_below, 0.0) if best.chosen_policy == "gated" and best.threshold >= 1 else None
    )
    rec = dataclasses.replace(pool, policy=best.chosen_policy, proposer=best.proposer, budget=best.budget, gate=gate)
    where = (
        f"while at most {best.threshold} requests run (resume at {best.on_below})"
        if best.chosen_policy == "gated"
        else "with the draft budget chosen per step from the cost model"
        if best.chosen_policy == "adaptive"
        else "at every load"
    )
    verdict = (
        f"speculate with {best.proposer} ({best.chosen_policy}) {where}: up to {best.best_gain:+.0%} goodput and "
        f"{best.tpot_gain:.0%} lower median time per token vs off; "
        f"admitted concurrency {best.admitted_on} vs {best.admitted_off} without the proposer"
    )
    return PoolPlan(pool, cap, plans, rec, verdict)


def tune_threshold(
    items: Sequence[WorkloadItem],
    server: ServerConfig,
    rates: Sequence[float],
    settings: "PlanSettings",
    slo,
    budget: int,
    crossover: int,
    spread: int = 2,
) -> int:
    """The gate's threshold (off above it): the cost model's ``crossover`` batch, or a neighbour within
    ``spread`` whose worst-load goodput is closer to max(off, always) on independent arrivals
    (:func:`threshold_scores`; ties to the crossover). ``crossover`` 0 is returned unchanged."""
    if crossover < 1:
        return crossover
    scores = threshold_scores(
        items, server, rates, settings, slo, budget, range(max(1, crossover - spread), crossover + spread + 1)
    )
    return max(scores, key=lambda t: (round(scores[t], 4), -abs(t - crossover)))


def threshold_scores(
    items: Sequence[WorkloadItem],
    server: ServerConfig,
    rates: Sequence[float],
    settings: "PlanSettings",
    slo,
    budget: int,
    candidates: Sequence[int],
) -> dict[int, float]:
    """``{threshold: worst ratio over load levels of gated goodput to max(off, always)}``, simulated
    with seed ``settings.seed + 1``."""
    policies = {"off": Off(), "always": AlwaysOn(budget)}
    policies.update({f"gated@{t}": gated(t, budget, hysteresis_band(t)) for t in candidates})
    rows = sweep(
        items, policies, server, rates, settings.n_requests, slo, settings.seed + 1, replications=settings.replications
    )
    by_rate = by_rate_and_policy(rows, "goodput_rps")
    return {t: min(_to_best_fixed(g, f"gated@{t}") for g in by_rate.values()) for t in candidates}


def gated_goal(rows: Sequence[dict], tolerance: float = 0.02) -> tuple[bool, float]:
    """Whether gated goodput >= max(off, always) - tolerance at every load level; and the worst ratio."""
    by_rate = by_rate_and_policy(rows, "goodput_rps")
    worst = math.inf
    for g in by_rate.values():
        if "gated" not in g:
            continue
        worst = min(worst, _to_best_fixed(g, "gated"))
    return worst >= 1 - tolerance, worst


def _to_best_fixed(goodput: dict, policy: str) -> float:
    """``policy``'s goodput over max(off, always) at one load level (1.0 when neither serves any)."""
    ref = max(goodput["off"], goodput["always"])
    return 1.0 if ref <= 0 else goodput[policy] / ref
