"""Per-depth calibration of a proposer's own acceptance estimates (data only; imports nothing of specdec).

It lives below both the engine (``control.sizer.DraftSizer`` keeps one per source and request) and
the proposers (``proposers.hybrid`` ranks two sources' candidates in one calibrated currency), so
neither layer imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class RunningMean:
    """A running mean: the plain mean of the first ``1 / weight`` values, then an exponential one
    with step ``weight``, so early evidence is averaged and later evidence fades (the drafting
    overhead of ``control.sizer.DraftOverhead``, the model gate's gains and timings)."""

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

    ``predicted[d]`` sums the proposer's estimates for the verified nodes at depth ``d``;
    ``accepted[d]`` counts the steps whose accepted path reached depth ``d`` (a step accepts at most
    one node per depth). The ratios are capped at 1 and made non-increasing in depth (a running
    minimum), so a child's calibrated estimate never exceeds its parent's and pruning stays
    prefix-closed. The prior counts 0.5: estimates from a few lookup counts are unproven and a
    wasted verify costs more than a missed speculation on CPUs.

    Why per depth: most drafted mass sits deep in the tree, where estimates are least reliable (the
    suffix proposer's depth-1 nodes were accepted at half their estimate, depth 3-8 at a quarter to a
    fifth: ``benchmarks/replay_suffix_acceptance.py``, its table by depth). One scale for all nodes let
    the deep misses drag the good shallow estimates under the
    price of a node. Why ``decay`` (applied by :meth:`tick` once per decoding step, drafted or not):
    an estimator that stopped drafting after a bad start would otherwise never be tried again; in
    replay one wrong first answer ended all drafting for the decoder's lifetime. Both measured by
    ``benchmarks/replay_decoder.py``.
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
        """``(accepted[i] + prior_accepted[i]) / (predicted[i] + prior_predicted)`` per depth, as a
        running minimum from 1 (capped, non-increasing)."""
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
    and non-increasing like :class:`ScoreCalibration`; :meth:`update` feeds both. Why: requests
    differ far more than the decoder-wide ratios can say (extraction answers accept 2-8 tokens per
    step, code 0.17), and a request whose drafts keep missing should stop paying for them before
    the shared evidence moves. ``tick`` decays the request's own evidence only; the shared one
    ticks once per decoder step.
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
