"""Serving metrics from per-request timing records: goodput, throughput, latency percentiles.

Goodput: requests per second meeting both objectives, time to first token (arrival -> first token)
and time per output token (mean gap after the first); what a fleet is sized by.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class SLO:
    """Service-level objectives in seconds."""

    ttft_s: float
    tpot_s: float

    def __post_init__(self):
        if not (self.ttft_s > 0 and self.tpot_s > 0):
            raise ValueError(f"SLO targets must be > 0 seconds, got ttft_s={self.ttft_s}, tpot_s={self.tpot_s}")


@dataclasses.dataclass
class RequestRecord:
    """Timing of one finished request (seconds on the run's clock)."""

    rid: int
    arrival: float
    first_token: float
    finish: float
    output_tokens: int
    category: str = "all"
    opt_out: bool = False

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def tpot(self) -> float:
        """Mean seconds per output token after the first (0 for single-token outputs)."""
        return (self.finish - self.first_token) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0

    def meets(self, slo: SLO) -> bool:
        return self.ttft <= slo.ttft_s and self.tpot <= slo.tpot_s


def near_objective(records: Sequence[RequestRecord], slo: SLO, within: float = 0.1) -> int:
    """How many requests have a TTFT or TPOT within ``within`` (a fraction) of its objective, either
    side: a step-time error of that size can move each across it, and a run's goodput by one
    request each. Near a knee many do, so a short run's goodput is as coarse as ``1 / len(records)``
    per such request, whatever the model's accuracy."""
    if not 0 < within < 1:
        raise ValueError(f"within must be a fraction in (0, 1), got {within}")
    return sum(abs(r.ttft / slo.ttft_s - 1) <= within or abs(r.tpot / slo.tpot_s - 1) <= within for r in records)


def summarize(records: Sequence[RequestRecord], slo: SLO, busy_s: float | None = None) -> dict:
    """``requests``, ``goodput_rps`` (SLO-meeting requests / makespan), ``slo_attainment``,
    ``throughput_tok_s``, ``ttft_p50/p99``, ``tpot_p50/p99``, ``latency_p50/p99``, ``makespan_s`` and,
    given ``busy_s``, ``busy_s_per_mtok`` (compute seconds per million tokens)."""
    if not records:
        raise ValueError("summarize needs at least one finished request")
    arr = np.array([r.arrival for r in records])
    fin = np.array([r.finish for r in records])
    ttft = np.array([r.ttft for r in records])
    tpot = np.array([r.tpot for r in records])
    toks = int(sum(r.output_tokens for r in records))
    good = sum(r.meets(slo) for r in records)
    makespan = float(fin.max() - arr.min())
    if makespan <= 0:
        raise ValueError("records span zero time: cannot compute rates")
    out = {
        "requests": len(records),
        "good_requests": int(good),
        "goodput_rps": good / makespan,
        "slo_attainment": good / len(records),
        "throughput_tok_s": toks / makespan,
        "output_tokens": toks,
        "makespan_s": makespan,
        "ttft_p50": float(np.percentile(ttft, 50)), "ttft_p99": float(np.percentile(ttft, 99)),
        "tpot_p50": float(np.percentile(tpot, 50)), "tpot_p99": float(np.percentile(tpot, 99)),
        "latency_p50": float(np.percentile(fin - arr, 50)), "latency_p99": float(np.percentile(fin - arr, 99)),
    }
    if busy_s is not None:
        out["busy_s_per_mtok"] = busy_s / toks * 1e6
    return out
