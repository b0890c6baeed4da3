"""Per-depth calibration of a proposer's own acceptance estimates (imports nothing of specdec, so the
sizer and the hybrid proposer share it without importing each other).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class RunningMean:
    """The plain mean of the first ``1 / weight`` values, then an exponential one with step ``weight``."""

    value: float | None = None  # None until the first value
    n: int = 0

    def add(self, x: float, weight: float) -> None:
        self.n += 1
        self.value = x if self.value is None else self.value + max(weight, 1.0 / self.n) * (x - self.value)


@dataclass
class ScoreCalibration:
    """Shrinks a proposer's own acceptance estimates, depth by depth, by how they have fared so far.

    For tree depth ``d`` (1 = a child of the root)::

        ratio[d] = (accepted[d] + prior_accepted) / (predicted[d] + prior_predicted)

    ``predicted[d]`` sums the estimates of verified nodes at depth ``d``; ``accepted[d]`` counts steps
    whose accepted path reached ``d``. Ratios are capped at 1 and non-increasing in depth, so pruning
    stays prefix-closed; the prior (0.5) distrusts unproven estimates. Per depth because estimates
    degrade with depth; ``decay`` (:meth:`tick`, once per decoding step) lets an estimator that
    stopped drafting after a bad start be tried again (docs/engine.md).
    """

    prior_predicted: float = 4.0
    prior_accepted: float = 2.0
    decay: float = 0.998
    predicted: list[float] = field(default_factory=list)  # index d - 1
    accepted: list[float] = field(default_factory=list)

    def __post_init__(self):
        if not (self.prior_predicted > 0 and 0 <= self.prior_accepted <= self.prior_predicted):
            raise ValueError(
                f"ScoreCalibration needs 0 <= prior_accepted <= prior_predicted and prior_predicted > 0, "
                f"got {self.prior_accepted} / {self.prior_predicted}"
            )
        if not 0 < self.decay <= 1:
            raise ValueError(f"ScoreCalibration decay must be in (0, 1], got {self.decay}")

    def ratios(self, max_depth: int) -> list[float]:
        """``r[d - 1]`` for ``d = 1 .. max_depth``: capped at 1, non-increasing in ``d``."""
        return self._shrunk([self.prior_accepted] * max_depth, self.prior_predicted)

    def _shrunk(self, prior_accepted: Sequence[float], prior_predicted: float) -> list[float]:
        """``(accepted + prior_accepted) / (predicted + prior_predicted)`` per depth, running minimum from 1."""
        out, r = [], 1.0
        for i, prior in enumerate(prior_accepted):
            pred = self.predicted[i] if i < len(self.predicted) else 0.0
            acc = self.accepted[i] if i < len(self.accepted) else 0.0
            r = min(r, (acc + prior) / (pred + prior_predicted))
            out.append(r)
        return out

    def apply(self, probs: Sequence[float], depths: Sequence[int]) -> list[float]:
        """Calibrated estimates of nodes with the proposer's ``probs`` at tree ``depths`` (>= 1)."""
        r = self.ratios(max(depths, default=0))
        return [min(1.0, float(p) * r[d - 1]) for p, d in zip(probs, depths)]

    def update(self, probs: Sequence[float], depths: Sequence[int], accepted: int) -> None:
        """Record one verified tree: its nodes' raw estimates, their depths, the accepted length."""
        top = max(max(depths, default=0), accepted)
        while len(self.predicted) < top:
            self.predicted.append(0.0)
            self.accepted.append(0.0)
        for p, d in zip(probs, depths):
            self.predicted[d - 1] += float(p)
        for d in range(accepted):
            self.accepted[d] += 1.0

    def tick(self) -> None:
        """One decoding step passed: old evidence fades, the prior regains weight."""
        self.predicted = [x * self.decay for x in self.predicted]
        self.accepted = [x * self.decay for x in self.accepted]


@dataclass
class RequestCalibration(ScoreCalibration):
    """One request's own acceptance evidence, shrunk toward its source's decoder-wide calibration.

    ``ratio[d] = (accepted[d] + strength * shared_ratio[d]) / (predicted[d] + strength)``, capped
    and non-increasing; :meth:`update` feeds both. Requests differ far more than decoder-wide ratios
    say, so one whose drafts keep missing stops paying early. ``tick`` decays the request's own
    evidence only.
    """

    shared: ScoreCalibration = field(default_factory=ScoreCalibration)
    strength: float = 8.0

    def __post_init__(self):
        super().__post_init__()
        if not self.strength > 0:
            raise ValueError(f"RequestCalibration strength must be > 0, got {self.strength}")

    def ratios(self, max_depth: int) -> list[float]:
        return self._shrunk([self.strength * r for r in self.shared.ratios(max_depth)], self.strength)

    def update(self, probs: Sequence[float], depths: Sequence[int], accepted: int) -> None:
        super().update(probs, depths, accepted)
        self.shared.update(probs, depths, accepted)
