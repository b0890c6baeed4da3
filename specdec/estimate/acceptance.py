"""Per-proposer acceptance distributions: how many draft tokens the target accepts per step.

The simulator and the gates need the whole distribution, not an assumed rate. At a budget ``k`` below
the measured one a step accepts ``min(a, k)`` (chain drafts at ``k`` are prefixes of the full draft);
without ``drafted`` the full budget is assumed drafted. Measured by greedy replay
(:func:`specdec.measure.greedy_replay.measure_by_replay`) or from a decoder's metrics (:func:`from_histogram`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np



@dataclasses.dataclass
class AcceptanceDist:
    """Histogram of accepted draft tokens per speculative step.

    Attributes:
        counts: ``[max_budget + 1]`` step counts; ``counts[a]`` steps accepted ``a`` drafted tokens.
        propose_s_per_req: measured proposer wall time per request per step (seconds).
        name: what was measured (proposer name, category).
        drafted: ``[max_budget + 1]`` or None; ``drafted[d]`` steps drafted ``d`` nodes.
    """

    counts: np.ndarray
    propose_s_per_req: float = 0.0
    name: str = ""
    drafted: np.ndarray | None = None

    def __post_init__(self):
        c = np.asarray(self.counts, dtype=np.float64)
        if c.ndim != 1 or c.size < 1:
            raise ValueError(f"AcceptanceDist counts must be a 1-D array [max_budget + 1], got shape {c.shape}")
        if np.any(c < 0) or not np.all(np.isfinite(c)):
            raise ValueError("AcceptanceDist counts must be finite and >= 0")
        if c.sum() <= 0:
            raise ValueError(f"AcceptanceDist {self.name!r} has no measured steps")
        if self.propose_s_per_req < 0:
            raise ValueError(f"propose_s_per_req must be >= 0, got {self.propose_s_per_req}")
        self.counts = c
        if self.drafted is not None:
            d = np.asarray(self.drafted, dtype=np.float64)
            if d.shape != c.shape or np.any(d < 0) or d.sum() <= 0:
                raise ValueError(
                    f"AcceptanceDist drafted must be a non-negative, non-empty histogram of shape {c.shape}, got "
                    f"{d.shape}"
                )
            self.drafted = d

    def drafted_pmf(self, budget: int) -> np.ndarray:
        """``[k + 1]`` probabilities of drafting ``0..k`` nodes at budget ``k`` (all ``k`` without a record)."""
        k = self._check_budget(budget)
        if self.drafted is None:
            out = np.zeros(k + 1)
            out[k] = 1.0
            return out
        p = self.drafted / self.drafted.sum()
        out = p[: k + 1].copy()
        out[k] += p[k + 1 :].sum()
        return out

    def expected_max_drafted(self, budget: int, batch: int) -> float:
        """``E[max of batch draws of drafted nodes]``: the padded tree width a verify step pays for."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        cdf = np.cumsum(self.drafted_pmf(budget))
        return float(np.sum(1.0 - np.clip(cdf[:-1], 0.0, 1.0) ** batch))

    @property
    def max_budget(self) -> int:
        return self.counts.size - 1

    @property
    def steps(self) -> int:
        return int(self.counts.sum())

    def pmf(self, budget: int | None = None) -> np.ndarray:
        """``[k + 1]`` probabilities of accepting ``0..k`` tokens at draft budget ``k``."""
        k = self.max_budget if budget is None else self._check_budget(budget)
        p = self.counts / self.counts.sum()
        out = p[: k + 1].copy()
        out[k] += p[k + 1 :].sum()
        return out

    def expected_accepted(self, budget: int) -> float:
        """``E[min(A, k)]``: mean accepted drafted tokens per step at budget ``k``."""
        p = self.pmf(budget)
        return float(np.arange(p.size) @ p)

    def expected_tokens(self, budget: int) -> float:
        """Mean tokens emitted per step at budget ``k``: accepted drafts + the target's own token."""
        return 1.0 + self.expected_accepted(budget)

    def sample(self, rng: np.random.Generator, budget: int, size: int | None = None):
        """Draw accepted-token counts at budget ``k`` (int, or ``[size]`` array)."""
        p = self.pmf(budget)
        return rng.choice(p.size, size=size, p=p)

    def token_acceptance_rate(self) -> float:
        """Per-token acceptance ``alpha`` of a geometric model with the same mean at full budget."""
        k = self.max_budget
        mean = self.expected_accepted(k)
        lo, hi = 0.0, 1.0
        for _ in range(60):  # E[min(Geom, k)] = sum_{j=1..k} alpha^j is increasing in alpha
            mid = (lo + hi) / 2
            if sum(mid**j for j in range(1, k + 1)) < mean:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def _check_budget(self, budget: int) -> int:
        if not isinstance(budget, (int, np.integer)) or budget < 0:
            raise ValueError(f"draft budget must be an int >= 0, got {budget!r}")
        if budget > self.max_budget:
            raise ValueError(
                f"draft budget {budget} exceeds the measured max_budget {self.max_budget} of {self.name!r}; "
                "re-measure acceptance with a larger budget"
            )
        return int(budget)

    # ------------------------------------------------------------------ persistence / merging
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "counts": self.counts.tolist(),
            "propose_s_per_req": self.propose_s_per_req,
            "drafted": None if self.drafted is None else self.drafted.tolist(),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> "AcceptanceDist":
        missing = {"counts"} - set(d)
        if missing:
            raise ValueError(f"acceptance record lacks {sorted(missing)}")
        drafted = d.get("drafted")
        return cls(
            np.asarray(d["counts"]),
            float(d.get("propose_s_per_req", 0.0)),
            str(d.get("name", "")),
            None if drafted is None else np.asarray(drafted),
        )

    @classmethod
    def load(cls, path: str | Path) -> "AcceptanceDist":
        """A JSON histogram (:meth:`to_dict`'s form, or ``benchmarks/vllm/plan_vs_measured.py``'s from
        vLLM counters); ValueError naming the file when missing, not JSON or invalid."""
        path = Path(path)
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"no such acceptance file {str(path)!r}") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"acceptance file {str(path)!r} is not readable JSON: {exc}") from None
        if not isinstance(record, dict):
            raise ValueError(f"acceptance file {str(path)!r} must hold a JSON object with 'counts'")
        try:
            return cls.from_dict({"name": path.stem, **record})
        except (ValueError, TypeError) as exc:
            raise ValueError(f"acceptance file {str(path)!r}: {exc}") from None

    @classmethod
    def merge(cls, dists: Sequence["AcceptanceDist"], name: str = "") -> "AcceptanceDist":
        """Pool several histograms (same max_budget), e.g. categories into one workload."""
        if not dists:
            raise ValueError("merge needs at least one AcceptanceDist")
        k = {d.max_budget for d in dists}
        if len(k) != 1:
            raise ValueError(f"cannot merge acceptance histograms with different max_budget {sorted(k)}")
        steps = np.array([d.steps for d in dists], dtype=np.float64)
        prop = float(np.average([d.propose_s_per_req for d in dists], weights=steps))
        drafted = None
        if all(d.drafted is not None for d in dists):
            drafted = sum(d.drafted for d in dists)
        return cls(sum(d.counts for d in dists), prop, name, drafted)


def from_histogram(
    accepted_per_step: Sequence[int],
    max_budget: int,
    name: str = "",
    propose_s_per_req: float = 0.0,
    drafted_per_step: Sequence[int] | None = None,
) -> AcceptanceDist:
    """Build a distribution from raw per-step accepted (and optionally drafted) counts."""
    a = np.asarray(list(accepted_per_step), dtype=np.int64)
    if a.size and (a.min() < 0 or a.max() > max_budget):
        raise ValueError(f"accepted counts must lie in [0, {max_budget}], got range [{a.min()}, {a.max()}]")
    drafted = None
    if drafted_per_step is not None:
        d = np.asarray(list(drafted_per_step), dtype=np.int64)
        if d.shape != a.shape or (d.size and (d.min() < 0 or d.max() > max_budget or np.any(d < a))):
            raise ValueError(f"drafted counts must be one per step, in [accepted, {max_budget}]")
        drafted = np.bincount(d, minlength=max_budget + 1).astype(np.float64)
    return AcceptanceDist(np.bincount(a, minlength=max_budget + 1).astype(np.float64), propose_s_per_req, name, drafted)
