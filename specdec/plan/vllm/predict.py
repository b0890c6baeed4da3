"""Predicted goodput against load for one candidate on one pool, with an uncertainty band.

The simulator (vLLM V1's packed scheduling: ``max_num_batched_tokens``, ``max_num_seqs``, admission
by the candidate's own KV blocks) runs the candidate's measured step costs and acceptance on the
pool's requests arriving as a Poisson process. Score: goodput (``latency`` pools) or good output
tokens/s (``throughput`` pools). The band spans ``replications`` seeds, each also with every step
``1 +- band`` times as long (the cost fit's leave-one-out error); it opens wide near the knee.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from ..goodput import SLO, RequestRecord, summarize
from ...estimate.acceptance import AcceptanceDist
from ..policies import AlwaysOn, Off, Policy
from ..simulator import ServerConfig, simulate
from ..workload import SimRequest, WorkloadItem, make_requests, poisson_arrivals
from ...estimate.step_cost import StepCostModel
from .calibrate import Calibration
from .candidates import Candidate
from .engine_trace import Engine
from .schedule import SchedulePolicy


class StepModels(NamedTuple):
    """What a candidate is predicted with: ``cost`` (its steps), ``acceptance`` (None: off) and
    ``no_draft``, the steps in which its schedule says K = 0 (None: ``cost``; see
    :func:`~.schedule.no_draft_tax`)."""

    cost: StepCostModel
    acceptance: AcceptanceDist | None
    no_draft: StepCostModel | None = None


def policy_for(candidate: Candidate) -> Policy:
    """Off, a fixed K every step, or the candidate's schedule."""
    if candidate.method == "off":
        return Off()
    return SchedulePolicy(candidate) if candidate.schedule is not None else AlwaysOn(candidate.k)


def score(records, slo: SLO, objective: str) -> dict:
    """The summary of one simulated or measured run plus ``score`` (module docstring)."""
    out = summarize(records, slo)
    good_tokens = sum(r.output_tokens for r in records if r.meets(slo))
    out["good_tok_s"] = good_tokens / out["makespan_s"]
    out["score"] = out["goodput_rps"] if objective == "latency" else out["good_tok_s"]
    return out


def backlog(records) -> int:
    """Requests still unfinished when the last one arrives. A server that keeps up holds about its
    mean concurrency then, whatever the run's length; one that does not holds a queue that grows with
    every request (``n * (1 - capacity / rate)``)."""
    last = max(r.arrival for r in records)
    return sum(r.finish > last for r in records)


def rates_for(low: float, high: float, levels: int) -> list[float]:
    """``levels`` rates spread evenly on a log scale from ``low`` to ``high``."""
    if levels < 2:
        raise ValueError(f"need at least 2 load levels, got {levels}")
    return [float(x) for x in np.geomspace(low, high, levels)]


def _setup(candidate: Candidate, cost: StepCostModel, acceptance: AcceptanceDist | None,
           band: float | None) -> tuple[Policy, AcceptanceDist, float, tuple[float, ...]]:
    """``(policy, the acceptance it draws from, band, step-time scales)`` for one candidate's
    prediction; ValueError for a speculating candidate without acceptance, or one that drafts past
    what was measured."""
    policy = policy_for(candidate)
    if candidate.method != "off" and acceptance is None:
        raise ValueError(f"{candidate.name}: a speculating candidate needs its measured acceptance")
    k = max(1, candidate.k)
    dist = acceptance if acceptance is not None else AcceptanceDist(np.eye(k + 1)[0], name="never drafts")
    if policy.max_budget > dist.max_budget:
        raise ValueError(f"{candidate.name}: acceptance measured up to {dist.max_budget} tokens, the policy drafts "
                         f"up to {policy.max_budget}")
    band = cost.error_band() if band is None else band
    return policy, dist, band, ((1.0, 1.0 + band, 1.0 - band) if band > 0 else (1.0,))


def _server(cost: StepCostModel, dist: AcceptanceDist, kv_tokens: int, engine: Engine, seed: int,
            no_draft: StepCostModel | None) -> ServerConfig:
    """vLLM V1's packed scheduler with ``engine``'s limits and ``kv_tokens`` of KV."""
    return ServerConfig(cost, dist, kv_capacity_tokens=kv_tokens, max_batch=engine.max_num_seqs, seed=seed,
                        scheduler="packed", max_batched_tokens=engine.max_batched_tokens, cost_no_draft=no_draft)


def predict(candidate: Candidate, cost: StepCostModel, acceptance: AcceptanceDist | None,
            items: Sequence[WorkloadItem], kv_tokens: int, engine: Engine, rates: Sequence[float], slo: SLO,
            objective: str, *, n_requests: int = 200, replications: int = 3, seed: int = 0,
            band: float | None = None, no_draft: StepCostModel | None = None) -> list[dict]:
    """One row per rate: ``rate``, ``score`` (mean over seeds), ``lo`` / ``hi`` (the band), the mean
    ``goodput_rps``, ``good_tok_s``, ``throughput_tok_s``, ``ttft_p50``, ``tpot_p50``, ``mean_batch`` and
    :func:`backlog`, and ``sustained``: the mean backlog fits in one batch (``max_num_seqs``), so no
    queue outgrows the server. An unsustained load's score measures how long the simulated overload
    lasted (``n_requests``), not the configuration. ``no_draft``: :attr:`StepModels.no_draft`."""
    policy, dist, band, scales = _setup(candidate, cost, acceptance, band)
    rows = []
    for i, rate in enumerate(rates):
        runs: dict[float, list[dict]] = {s: [] for s in scales}
        for rep in range(replications):
            rng = np.random.default_rng([seed, i, rep])
            reqs = make_requests(list(items), poisson_arrivals(rate, n_requests, rng), rng)
            server = _server(cost, dist, kv_tokens, engine, seed + 1000 * rep, no_draft)
            for s in scales:
                res = simulate(reqs, policy, server if s == 1.0 else server.scaled(s))
                row = score(res.records, slo, objective)
                row["mean_batch"] = res.mean_batch
                row["backlog"] = backlog(res.records)
                runs[s].append(row)
        mid = runs[1.0]
        every = [r["score"] for rs in runs.values() for r in rs]
        out = {key: float(np.mean([r[key] for r in mid]))
               for key in ("score", "goodput_rps", "good_tok_s", "throughput_tok_s", "ttft_p50", "tpot_p50",
                           "mean_batch", "backlog")}
        out.update(rate=float(rate), lo=float(min(every)), hi=float(max(every)), band=band,
                   sustained=out["backlog"] <= engine.max_num_seqs)
        rows.append(out)
    return rows


def run_records(run) -> list[RequestRecord]:
    """A measured run's (:class:`~.measure.PoolRun`) requests as the client saw them: sent, first and
    last chunk, output tokens, category."""
    return [RequestRecord(i, s.sent, s.chunk_times[0], s.chunk_times[-1], s.tokens, cat)
            for i, (s, cat) in enumerate(zip(run.streams, run.categories))]


def score_run(run, slo: SLO, objective: str) -> dict:
    """The pool's score of a measured run, summarised as :func:`score` does a simulated run."""
    return score(run_records(run), slo, objective)


def predict_run(candidate: Candidate, cost: StepCostModel, acceptance: AcceptanceDist | None, run, kv_tokens: int,
                engine: Engine, slo: SLO, objective: str, *, replications: int = 5, seed: int = 0,
                band: float | None = None, no_draft: StepCostModel | None = None) -> dict:
    """The prediction for exactly the requests of a measured run: its arrival times, prompt and output
    lengths (so prediction and measurement differ only in the engine model); keys as :func:`predict`'s rows."""
    t0 = run.streams[0].sent
    reqs = [SimRequest(i, s.sent - t0, WorkloadItem(int(s.prompt_tokens), max(1, s.tokens), cat))
            for i, (s, cat) in enumerate(zip(run.streams, run.categories))]
    policy, dist, band, scales = _setup(candidate, cost, acceptance, band)
    runs: dict[float, list[dict]] = {sc: [] for sc in scales}
    for rep in range(replications):
        server = _server(cost, dist, kv_tokens, engine, seed + 1000 * rep, no_draft)
        for sc in scales:
            res = simulate(reqs, policy, server if sc == 1.0 else server.scaled(sc))
            runs[sc].append(score(res.records, slo, objective))
    every = [r["score"] for rs in runs.values() for r in rs]
    out = {key: float(np.mean([r[key] for r in runs[1.0]]))
           for key in ("score", "goodput_rps", "good_tok_s", "throughput_tok_s", "ttft_p50", "tpot_p50")}
    out.update(lo=float(min(every)), hi=float(max(every)), band=band)
    return out


def predict_calibrated(candidate: Candidate, cal: Calibration, kv_tokens: int, engine: Engine,
                       rates: Sequence[float], slo: SLO, objective: str, **kw) -> list[dict]:
    """:func:`predict` with a candidate's own calibration."""
    return predict(candidate, cal.cost, cal.acceptance, cal.items, kv_tokens, engine, rates, slo, objective, **kw)
