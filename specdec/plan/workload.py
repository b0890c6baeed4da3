"""Workloads: what requests look like (prompt and output lengths, category) and when they arrive.

Speculation's value depends on output length, prompt length and category, so the simulator draws
requests from measured items, not averages.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class WorkloadItem:
    """One request template: prompt tokens, output tokens and a category (selects acceptance)."""

    prompt_len: int
    output_len: int
    category: str = "all"

    def __post_init__(self):
        if self.prompt_len < 1 or self.output_len < 1:
            raise ValueError(f"WorkloadItem needs prompt_len >= 1 and output_len >= 1, got {self}")


@dataclasses.dataclass(frozen=True)
class SimRequest:
    """A request as the simulator sees it: arrival time (s) + its item + per-request opt-out."""

    rid: int
    arrival: float
    item: WorkloadItem
    opt_out: bool = False


def poisson_arrivals(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``[n]`` arrival times (s) of a Poisson process with ``rate`` requests per second."""
    if not rate > 0:
        raise ValueError(f"arrival rate must be > 0 requests/s, got {rate}")
    if n < 1:
        raise ValueError(f"number of requests must be >= 1, got {n}")
    return np.cumsum(rng.exponential(1.0 / rate, size=n))


def make_requests(items: Sequence[WorkloadItem], arrivals: Sequence[float], rng: np.random.Generator,
                  opt_out_fraction: float = 0.0) -> list[SimRequest]:
    """Pair each arrival time with a workload item drawn uniformly (and an opt-out coin flip)."""
    if not items:
        raise ValueError("workload has no items")
    if not 0.0 <= opt_out_fraction <= 1.0:
        raise ValueError(f"opt_out_fraction must be in [0, 1], got {opt_out_fraction}")
    arrivals = np.asarray(arrivals, dtype=np.float64)
    if arrivals.size and (np.any(np.diff(arrivals) < 0) or arrivals[0] < 0):
        raise ValueError("arrival times must be >= 0 and non-decreasing")
    idx = rng.integers(len(items), size=arrivals.size)
    opt = rng.random(arrivals.size) < opt_out_fraction
    return [SimRequest(i, float(t), items[int(j)], bool(o)) for i, (t, j, o) in enumerate(zip(arrivals, idx, opt))]


def items_from(prompts: dict, outputs: dict, categories: dict) -> list[WorkloadItem]:
    """Workload items from tokenised prompts, their outputs and each request's category."""
    return [WorkloadItem(len(prompts[r]), max(1, len(outputs[r])), categories[r]) for r in prompts]
