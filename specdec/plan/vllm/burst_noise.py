"""The loss at an overload a plan can tell from noise, measured from its bursts.

Where neither a candidate nor off keeps up, the plan compares output tokens/s, which come from the
full-batch steps only the bursts reach (:func:`~.measure.measure_burst`); bursts of the same requests
on one server do not take the same time, so each candidate gets ``n`` and the spread is measured.
Per burst, ``x`` = mean ``log(measured seconds / the candidate's fit)`` over its decode steps of
``min_rows`` rows or more (the fit carries the burst's own drafting). ``sigma``: the pooled
within-candidate spread of ``x``; ``floor = 1 - exp(-1.645 sigma sqrt(2 / n))``, the smallest loss
two candidates' means tell apart at one-sided 5% (:func:`~.decide.assess`). One burst each: floor 0.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

from .calibrate import DEFAULT_GAP, Calibration, run_samples
from .engine_trace import Engine
from .measure import PoolRun

Z_ONE_SIDED_5 = 1.645
MIN_STEPS = 3  # full-batch decode steps a burst needs to give a mean
FULL_SHARE = 0.75  # a step of at least this share of max_num_seqs rows counts as the full batch


@dataclasses.dataclass(frozen=True)
class BurstNoise:
    """``sigma``: one burst's full-batch log step-time spread; ``dof``: its pooled degrees of freedom
    (0: not measured, ``sigma`` 0); ``bursts``: per candidate; ``floor``: the module docstring's."""

    sigma: float
    dof: int
    bursts: int
    floor: float

    @classmethod
    def of(cls, sigma: float, dof: int, bursts: int) -> "BurstNoise":
        if dof < 1 or bursts < 2:
            return cls(0.0, 0, bursts, 0.0)
        return cls(sigma, dof, bursts, 1.0 - math.exp(-Z_ONE_SIDED_5 * sigma * math.sqrt(2.0 / bursts)))


def full_rows(max_num_seqs: int) -> int:
    """The fewest rows a step needs to count as a full batch."""
    return max(1, math.ceil(FULL_SHARE * max_num_seqs))


def burst_residual(burst: PoolRun, cal: Calibration, min_rows: int, gap: float = DEFAULT_GAP,
                   engine: Engine | None = None) -> float | None:
    """Mean ``log(seconds / cal.cost's prediction)`` over ``burst``'s decode steps of ``min_rows`` rows or
    more (None: fewer than :data:`MIN_STEPS` such steps)."""
    w = cal.cost.weights
    logs = [math.log(s.seconds / float(s.work() @ w)) for s in run_samples(burst, gap, decode_only=True, engine=engine)
            if s.work()[1] >= min_rows - 1e-9 and float(s.work() @ w) > 0]
    return float(np.mean(logs)) if len(logs) >= MIN_STEPS else None


def burst_noise(bursts: Mapping[str, Sequence[PoolRun]], cals: Mapping[str, Calibration], min_rows: int,
                gap: float = DEFAULT_GAP, engine: Engine | None = None) -> BurstNoise:
    """The pooled spread of ``bursts[name]``' full-batch residuals against ``cals[name]`` (module
    docstring); candidates without a calibration or with fewer than two usable bursts add nothing.
    ``bursts`` per candidate is the most any candidate had."""
    n = max((len(b) for b in bursts.values()), default=0)
    ss, dof = 0.0, 0
    for name, runs in bursts.items():
        if name not in cals:
            continue
        xs = [x for x in (burst_residual(b, cals[name], min_rows, gap, engine) for b in runs) if x is not None]
        if len(xs) >= 2:
            ss += float(np.sum((np.asarray(xs) - np.mean(xs)) ** 2))
            dof += len(xs) - 1
    return BurstNoise.of(math.sqrt(ss / dof) if dof else 0.0, dof, n)
