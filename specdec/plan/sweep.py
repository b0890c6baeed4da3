"""Load sweeps: every policy at every arrival rate (the decision flips with load), on the same
arrivals per rate (common random numbers make the comparison far less noisy).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

from .goodput import SLO, summarize
from .policies import Off, Policy
from .simulator import ServerConfig, simulate
from .workload import SimRequest, WorkloadItem, make_requests, poisson_arrivals


def saturation_batch(items: Sequence[WorkloadItem], server: ServerConfig, default: int = 256) -> int:
    """How many requests the server can run at once without speculation (memory or max_batch)."""
    limits = []
    if server.max_batch is not None:
        limits.append(server.max_batch)
    cap = server.kv_capacity_tokens_off or server.kv_capacity_tokens
    if cap is not None:
        mean_need = float(np.mean([i.prompt_len + i.output_len for i in items]))
        limits.append(max(1, int(cap // mean_need)))
    return min(limits) if limits else default


def capacity_rps(items: Sequence[WorkloadItem], server: ServerConfig, rounds: int = 3, seed: int = 0) -> float:
    """Requests/s plain decoding sustains when always full: a closed batch of ``rounds`` x saturation."""
    if not items:
        raise ValueError("capacity_rps needs workload items")
    n = rounds * saturation_batch(items, server)
    rng = np.random.default_rng(seed)
    reqs = make_requests(items, np.zeros(n), rng)
    res = simulate(reqs, Off(), server)
    return n / max(r.finish for r in res.records)


def sweep(items: Sequence[WorkloadItem], policies: Mapping[str, Policy], server: ServerConfig, rates: Sequence[float],
          n_requests: int, slo: SLO, seed: int = 0, opt_out_fraction: float = 0.0, replications: int = 1,
          cost_band: float = 0.0) -> list[dict]:
    """One row per (Poisson ``rate``, policy), the mean over ``replications`` arrival sequences: what
    :func:`~specdec.plan.goodput.summarize` returns plus ``policy``, ``rate``, ``mean_batch``,
    ``max_batch``, ``switches``, ``drafted``, ``accepted`` and ``cost_rel_off`` (compute per token vs
    ``"off"`` at that rate, NaN without it). ``cost_band > 0`` reruns with target step costs times
    ``1 +- cost_band`` (same arrivals; triple the time) and adds ``goodput_lo`` / ``goodput_hi`` /
    ``tpot_p50_lo`` / ``tpot_p50_hi``: near saturation goodput moves far more than step time.
    """
    if not policies:
        raise ValueError("sweep needs at least one policy")
    if not rates or min(rates) <= 0:
        raise ValueError(f"sweep rates must be a non-empty list of positive requests/s, got {list(rates)}")
    if replications < 1:
        raise ValueError(f"replications must be >= 1, got {replications}")
    if not 0 <= cost_band < 1:
        raise ValueError(f"cost_band must be in [0, 1), got {cost_band}")
    bands = {"lo": 1 + cost_band, "hi": 1 - cost_band} if cost_band > 0 else {}
    rows = []
    for i, rate in enumerate(rates):
        reps: dict[str, list[dict]] = {name: [] for name in policies}
        for rep in range(replications):
            rng = np.random.default_rng([seed, i, rep])
            reqs: list[SimRequest] = make_requests(
                items, poisson_arrivals(rate, n_requests, rng), rng, opt_out_fraction
            )
            rep_server = dataclasses.replace(server, seed=server.seed + 1000 * rep)
            for name, policy in policies.items():
                res = simulate(reqs, policy, rep_server)
                row = summarize(res.records, slo, res.busy_s)
                row.update(
                    mean_batch=res.mean_batch,
                    max_batch=res.max_batch,
                    switches=res.switches,
                    drafted=res.drafted,
                    accepted=res.accepted,
                )
                for side, factor in bands.items():
                    res_b = simulate(reqs, policy, rep_server.scaled(factor))
                    row_b = summarize(res_b.records, slo, res_b.busy_s)
                    row[f"goodput_{side}"], row[f"tpot_p50_{side}"] = row_b["goodput_rps"], row_b["tpot_p50"]
                reps[name].append(row)
        group = []
        for name, runs in reps.items():
            row = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
            row.update(policy=name, rate=float(rate), replications=replications)
            group.append(row)
        off = next((r for r in group if r["policy"] == "off"), None)
        for r in group:
            r["cost_rel_off"] = r["busy_s_per_mtok"] / off["busy_s_per_mtok"] if off else math.nan
        rows.extend(group)
    return rows
