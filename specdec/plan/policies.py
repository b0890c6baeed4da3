"""Speculation policies: per step, the draft budget for the running batch.

A policy is stateful across one run (a gate remembers whether it is on), so the simulator calls
``reset()`` before each run. Per-request opt-out is applied on top of any policy by the caller:
an opted-out request gets budget 0 whatever the policy says.

* ``off`` -- plain decoding; the proposer is not even loaded (its memory is free for KV).
* ``always`` -- fixed budget every step, whatever the load (what a single-stream benchmark tunes).
* ``gated`` -- fixed budget while the batch is at or below a threshold, with hysteresis.
* ``adaptive`` -- budget chosen per step by :class:`~specdec.control.load_gate.BudgetOptimizer`
  (SmartSpec-style: maximise expected tokens per second of the batch), optionally load-gated too.
"""

from __future__ import annotations

import math

from ..control.load_gate import BudgetOptimizer, LoadGate


class Policy:
    """Base policy: ``decide(batch, context) -> budget``; ``observe(drafted, accepted)``; ``reset()``."""

    name = "policy"
    uses_proposer = True

    def reset(self) -> None:
        """Forget state from a previous run."""

    def decide(self, batch_size: int, context: float) -> int:
        raise NotImplementedError

    def observe(self, drafted: int, accepted: int) -> None:
        """Feedback after a step (summed over the batch)."""

    @property
    def max_budget(self) -> int:
        """Largest budget this policy can return (the simulator reserves KV for it)."""
        raise NotImplementedError

    @property
    def switches(self) -> int:
        """How many times the policy turned speculation on or off (0 for stateless policies)."""
        return 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class Off(Policy):
    name = "off"
    uses_proposer = False

    def decide(self, batch_size: int, context: float) -> int:
        return 0

    @property
    def max_budget(self) -> int:
        return 0


class AlwaysOn(Policy):
    """Draft ``budget`` tokens per request every step."""

    name = "always"

    def __init__(self, budget: int):
        if budget < 1:
            raise ValueError(f"AlwaysOn budget must be >= 1, got {budget}")
        self.budget = int(budget)

    def decide(self, batch_size: int, context: float) -> int:
        return self.budget

    @property
    def max_budget(self) -> int:
        return self.budget


class Gated(Policy):
    """Delegates to a :class:`LoadGate` (fixed budget or optimizer-chosen)."""

    def __init__(self, gate: LoadGate, name: str = "gated"):
        self.gate = gate
        self.name = name

    def reset(self) -> None:
        self.gate.reset()

    def decide(self, batch_size: int, context: float) -> int:
        return self.gate.decide(batch_size, context).budget

    def observe(self, drafted: int, accepted: int) -> None:
        self.gate.observe(drafted, accepted)

    @property
    def max_budget(self) -> int:
        if self.gate.optimizer is not None:
            return min(self.gate.budget, self.gate.optimizer.max_budget)
        return self.gate.budget

    @property
    def switches(self) -> int:
        return self.gate.switches


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
    """Default resume level for a gate that turns off above ``threshold``: a quarter below it, but
    at least 1 -- a gate that resumes only at 0 running requests never reopens while any request
    runs, so a threshold of 1 gets no band (off above 1, on at 1)."""
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    if threshold == 0:
        return 0
    return max(1, threshold - max(1, threshold // 4))
