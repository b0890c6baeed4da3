"""Speculation policies: per step, the draft budget for the running batch.

Each policy is a :class:`~specdec.control.interface.DraftController` with a report name, stateful within
a run (``reset()`` before each); opted-out requests get 0 whatever the policy says. ``off`` (proposer not
loaded), ``always`` (fixed budget), ``gated`` (fixed budget at or below a batch threshold, with
hysteresis), ``adaptive`` (per-step budget from :class:`~specdec.control.load_gate.BudgetOptimizer`,
optionally gated).
"""

from __future__ import annotations

import math

from ..control.interface import BatchView, Decision, FixedBudget, Outcome
from ..control.load_gate import BudgetOptimizer, LoadGate


class Policy:
    """A :class:`~specdec.control.interface.DraftController` the simulator runs, with the name its reports
    show. ``uses_proposer``: False when the proposer is not loaded at all (its memory is free for KV);
    ``switches``: how often it turned speculation on or off."""

    name = "policy"
    unit = "tokens"
    uses_proposer = True
    switches = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class Off(Policy, FixedBudget):
    """Plain decoding; the proposer is not loaded."""

    name = "off"
    uses_proposer = False

    def __init__(self):
        FixedBudget.__init__(self, 0)


class AlwaysOn(Policy, FixedBudget):
    """Draft ``budget`` tokens per request every step."""

    name = "always"

    def __init__(self, budget: int):
        if budget < 1:
            raise ValueError(f"AlwaysOn budget must be >= 1, got {budget}")
        FixedBudget.__init__(self, int(budget))


class Gated(Policy):
    """A :class:`LoadGate` under a report name (``gated``: fixed budget; ``adaptive``: optimizer-chosen)."""

    def __init__(self, gate: LoadGate, name: str = "gated"):
        self.gate = gate
        self.name = name

    @property
    def max_budget(self) -> int:
        return self.gate.max_budget

    @property
    def switches(self) -> int:
        return self.gate.switches

    def decide(self, batch: BatchView) -> Decision:
        return self.gate.decide(batch)

    def observe(self, outcome: Outcome) -> None:
        self.gate.observe(outcome)

    def reset(self) -> None:
        self.gate.reset()


def gated(off_above: float, budget: int, on_below: float | None = None, min_accept_rate: float = 0.0) -> Gated:
    """Fixed ``budget`` while the batch is <= ``off_above`` (resume at <= ``on_below``)."""
    if budget < 1:
        raise ValueError(f"gated budget must be >= 1, got {budget}")
    return Gated(
        LoadGate(off_above=off_above, on_below=on_below, budget=budget, min_accept_rate=min_accept_rate), "gated"
    )


def adaptive(
    optimizer: BudgetOptimizer,
    off_above: float = math.inf,
    on_below: float | None = None,
    max_budget: int | None = None,
) -> Gated:
    """Per-step budget maximising expected batch tokens/s (0 = plain decoding when nothing pays)."""
    cap = optimizer.max_budget if max_budget is None else max_budget
    return Gated(LoadGate(off_above=off_above, on_below=on_below, optimizer=optimizer, budget=cap), "adaptive")


def hysteresis_band(threshold: int) -> int:
    """Resume level for a gate off above ``threshold``: a quarter below it, at least 1 (a gate resuming
    only at 0 never reopens while requests run)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    if threshold == 0:
        return 0
    return max(1, threshold - max(1, threshold // 4))
