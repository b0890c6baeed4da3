"""Whether the machine kept its speed while the plan measured: off's full batch again at the end.

Candidates are measured minutes apart and compared as if on one machine; a machine that speeds up or
slows down in between shifts every later candidate against off. So after the last candidate off's
server starts again and takes ``bursts`` full batches per pool, read as :mod:`.burst_noise` reads
a burst. ``shift`` = their mean residual less off's first bursts': log(end / start) of off's
full-batch step. ``se = sigma sqrt(1/n_start + 1/n_end)``; **told** when ``|shift| > 1.96 se``.
Every prediction's band ``b`` becomes ``sqrt(b^2 + shift^2)``; a told shift also widens the loss at
an overload that counts to ``1 - exp(-(z sigma sqrt(2/n) + |shift|))``. ``shift`` None: not measured.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from .burst_noise import BurstNoise, burst_residual
from .calibrate import DEFAULT_GAP, Calibration
from .engine_trace import Engine
from .measure import PoolRun

Z_TWO_SIDED_5 = 1.96


@dataclasses.dataclass(frozen=True)
class Drift:
    """``shift``: log(off's full-batch step at the end / at the start), None when not measured;
    ``se``: its standard error (None: the bursts' noise was not measured); ``bursts``: the end's."""

    shift: float | None
    se: float | None
    bursts: int

    @property
    def told(self) -> bool:
        """The shift lies beyond the bursts' own noise (two-sided 5%)."""
        return self.shift is not None and self.se is not None and abs(self.shift) > Z_TWO_SIDED_5 * self.se

    @property
    def factor(self) -> float | None:
        """Off's full-batch step at the end over at the start (None: not measured)."""
        return None if self.shift is None else math.exp(self.shift)

    def band(self, band: float) -> float:
        """The cost fit's error ``band`` widened by the shift (module docstring)."""
        return band if self.shift is None else math.hypot(band, self.shift)

    def floor(self, noise: BurstNoise) -> float:
        """The loss at an overload that counts: ``noise.floor``, widened by a told shift."""
        # noise.floor = 1 - exp(-spread), so adding |shift| to the spread multiplies 1 - floor by exp(-|shift|)
        return 1.0 - (1.0 - noise.floor) * math.exp(-abs(self.shift)) if self.told else noise.floor


NOT_MEASURED = Drift(None, None, 0)


def drift(first: Sequence[PoolRun], last: Sequence[PoolRun], cal: Calibration, min_rows: int, noise: BurstNoise,
          gap: float = DEFAULT_GAP, engine: Engine | None = None) -> Drift:
    """Off's ``last`` bursts against its ``first`` ones, both read against ``cal`` (off's fit, which
    holds ``first``); :data:`NOT_MEASURED` when either side has no burst with enough full-batch
    steps (:func:`~.burst_noise.burst_residual`)."""
    xs, ys = ([x for x in (burst_residual(b, cal, min_rows, gap, engine) for b in runs) if x is not None]
              for runs in (first, last))
    if not xs or not ys:
        return NOT_MEASURED
    se = noise.sigma * math.sqrt(1.0 / len(xs) + 1.0 / len(ys)) if noise.dof else None
    return Drift(float(np.mean(ys) - np.mean(xs)), se, len(ys))
