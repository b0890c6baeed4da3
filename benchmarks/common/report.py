"""How the benchmarks summarise what they measured: paired intervals, acceptance by depth, JSON files."""

from __future__ import annotations

import json
from typing import Sequence

import numpy as np


def ratio_ci(num: Sequence[float], den: Sequence[float], *, level: float = 0.95, reps: int = 4000,
             seed: int = 0) -> tuple[float, float]:
    """Paired bootstrap interval of ``sum(num) / sum(den)`` over items (prompts).

    ``num[i]`` and ``den[i]`` were measured on the same item, so an item is resampled with both of
    its values: a hard prompt slows both methods and must not widen the interval of their ratio.
    Why: per-category speedups rest on 2-3 prompts, and a difference smaller than this interval is
    not a result. Returns ``(lo, hi)``; a single item gives its own ratio twice.
    """
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"ratio_ci needs two equal-length, non-empty sequences, got {a.shape} and {b.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    idx = np.random.default_rng(seed).integers(0, a.size, size=(reps, a.size))
    ratios = a[idx].sum(axis=1) / b[idx].sum(axis=1)
    lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def accepted_histogram(accepted: Sequence[int], budget: int) -> list[int]:
    """``hist[a]`` = steps that accepted ``a`` drafted tokens, ``a = 0..budget``."""
    hist = [0] * (budget + 1)
    for a in accepted:
        if not 0 <= a <= budget:
            raise ValueError(f"a step accepted {a} tokens, outside [0, {budget}]: the proposer drafted past the budget")
        hist[a] += 1
    return hist


def depth_acceptance(hist: list[int]) -> list[float]:
    """``P(accepted >= d)`` for ``d = 1..`` from an accepted-length histogram (acceptance by depth)."""
    steps = sum(hist)
    out, left = [], steps
    for d in range(1, len(hist)):
        left -= hist[d - 1]
        if left <= 0:
            break
        out.append(round(left / steps, 4))
    return out


def save_json(path: str | None, obj: dict) -> None:
    """Write ``obj`` to ``path`` (indented) when a path is given."""
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)
