"""The draft controller: one interface for every policy that decides how much to draft now.

Every step a controller reads a :class:`BatchView`, returns a :class:`Decision` (a budget per
request in its :data:`Unit`, a floor, and why; budget 0 is "off"), and is told the step's
:class:`Outcome`. The question is the same everywhere (is one more drafted token or node worth its
verify time at this load?), only the evidence differs; one interface lets policies compose
(:class:`Capped`) and be compared in one simulator. docs/architecture.md lists the implementations.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable, Literal, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

Unit = Literal["tokens", "nodes"]
"""What a budget counts: ``"tokens"``, the length of a chain (engines that verify chains: vLLM);
``"nodes"``, the nodes of a draft tree (specdec's decoder)."""


@dataclasses.dataclass(frozen=True)
class BatchView:
    """What a controller reads before a step.

    Attributes:
        rows: requests in the running batch.
        context: mean committed tokens per request.
        req_ids: the rows' request ids (empty when the caller has none).
        cap: the most any request may get (set by a composing controller: :class:`Capped`).
        hints: per-request evidence keyed by request id (e.g. a draft's expected accepted tokens).
    """

    rows: int
    context: float = 0.0
    req_ids: tuple[Hashable, ...] = ()
    cap: int | None = None
    hints: Mapping[Hashable, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if self.rows < 0:
            raise ValueError(f"BatchView.rows must be >= 0, got {self.rows}")
        if self.req_ids and len(self.req_ids) != self.rows:
            raise ValueError(f"BatchView has {len(self.req_ids)} req_ids for {self.rows} rows")
        if self.cap is not None and self.cap < 0:
            raise ValueError(f"BatchView.cap must be >= 0, got {self.cap}")


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a controller returns: ``budget`` per request (``per_request`` overrides it row by row, in
    ``BatchView.req_ids`` order), the ``floor`` an acceptance probability must reach to be worth
    verifying (0: keep all), and ``reason``; ``speculate`` is False when every budget is 0."""

    budget: int
    floor: float = 0.0
    reason: str = ""
    per_request: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.budget < 0 or (self.per_request is not None and min(self.per_request, default=0) < 0):
            raise ValueError(f"Decision budgets must be >= 0, got {self.budget} / {self.per_request}")
        if not 0.0 <= self.floor <= 1.0:
            raise ValueError(f"Decision.floor must be in [0, 1], got {self.floor}")

    @property
    def speculate(self) -> bool:
        return (max(self.per_request, default=0) if self.per_request is not None else self.budget) > 0

    def budgets(self, rows: int) -> list[int]:
        """The budget of each of ``rows`` requests."""
        return list(self.per_request) if self.per_request is not None else [self.budget] * rows


OFF = Decision(0, reason="off")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a controller is told after the step its decision governed.

    Attributes:
        drafted / accepted: ``[rows]`` tokens (or nodes) drafted and accepted per request.
        budget: the budget the drafts were made with.
        seconds: wall time of the step (None: not timed).
        fit: whether ``seconds`` is one step of these rows (False: it spans more).
        offered: ``[rows]`` bool, the rows that could draft (default: all).
        prefill: rows of the step that carried prefill work.
        details: per-request evidence in the controller's own terms, keyed by request id.
        timings: seconds of the step's phases (``verify``, ``accept``, ...).
    """

    drafted: np.ndarray
    accepted: np.ndarray
    budget: int = 0
    seconds: float | None = None
    fit: bool = True
    offered: np.ndarray | None = None
    prefill: int = 0
    details: Mapping[Hashable, object] = dataclasses.field(default_factory=dict)
    timings: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, drafted: Sequence[int], accepted: Sequence[int], **kw) -> "Outcome":
        """An outcome from per-row counts, checked: ``0 <= accepted <= drafted`` row by row."""
        d = np.asarray(drafted, dtype=np.int64).reshape(-1)
        a = np.asarray(accepted, dtype=np.int64).reshape(-1)
        if d.shape != a.shape or (a > d).any() or (a < 0).any():
            raise ValueError("an Outcome needs 0 <= accepted <= drafted, row by row, in arrays of one shape")
        return cls(d, a, **kw)


@runtime_checkable
class DraftController(Protocol):
    """How much to draft now (see the module docstring). ``unit``: what its budgets count;
    ``max_budget``: the most it ever returns (an engine reserves room for it)."""

    unit: Unit

    @property
    def max_budget(self) -> int: ...

    def decide(self, batch: BatchView) -> Decision: ...

    def observe(self, outcome: Outcome) -> None: ...

    def reset(self) -> None: ...


class FixedBudget:
    """The same budget every step, whatever the load (``0``: plain decoding)."""

    def __init__(self, budget: int, unit: Unit = "tokens"):
        if not isinstance(budget, int) or budget < 0:
            raise ValueError(f"FixedBudget budget must be an int >= 0, got {budget!r}")
        self.budget, self.unit = budget, unit

    @property
    def max_budget(self) -> int:
        return self.budget

    def decide(self, batch: BatchView) -> Decision:
        b = self.budget if batch.cap is None else min(self.budget, batch.cap)
        return Decision(b, reason=f"fixed budget {b}") if b else OFF

    def observe(self, outcome: Outcome) -> None:
        del outcome

    def reset(self) -> None:
        pass


class Capped:
    """``outer`` decides first; ``inner`` decides within the outer budget (``BatchView.cap``); both are
    told every outcome (e.g. a load gate capping a cost gate). ValueError when their units differ."""

    def __init__(self, outer: DraftController, inner: DraftController):
        if outer.unit != inner.unit:
            raise ValueError(f"Capped needs controllers of one unit, got {outer.unit} and {inner.unit}")
        self.outer, self.inner, self.unit = outer, inner, outer.unit
        self.last_outer: Decision = OFF

    @property
    def max_budget(self) -> int:
        return min(self.outer.max_budget, self.inner.max_budget)

    def decide(self, batch: BatchView) -> Decision:
        self.last_outer = first = self.outer.decide(batch)
        if not first.speculate:
            return first
        cap = first.budget if batch.cap is None else min(first.budget, batch.cap)
        return self.inner.decide(dataclasses.replace(batch, cap=cap))

    def observe(self, outcome: Outcome) -> None:
        self.outer.observe(outcome)
        self.inner.observe(outcome)

    def reset(self) -> None:
        self.outer.reset()
        self.inner.reset()
