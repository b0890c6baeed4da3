"""The load gate inside the drafter: each step, draft or not (and how much) from the running batch,
recent acceptance and, with ``cost_gate``, this engine's own step times.

vLLM V1 applies no batch-size schedule to ``custom_class`` drafters, so :class:`GatedDrafting` runs
specdec's :class:`~specdec.control.load_gate.LoadGate` (capping a
:class:`~specdec.control.cost_gate.CostGate` with ``cost_gate``) on the rows vLLM passes, itself
capped by the config's ``num_speculative_tokens_per_batch_size`` when it has one
(:class:`~specdec.control.batch_schedule.BatchSchedule`); a "gate off" step returns no drafts.
Decisions are counted in :class:`GateStats` (the ``vllm:specdec_*`` metrics) and logged on logger
``vllm.specdec``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable


from ...control.batch_schedule import BatchSchedule, Schedule
from ...control.interface import BatchView, Capped, Decision, Outcome
from ...control.cost_gate import CostGate
from ...control.load_gate import LoadGate
from . import LOGGER_NAME

logger = logging.getLogger(LOGGER_NAME)


@dataclasses.dataclass
class GateStats:
    """Running totals of one drafter (plain counters, read by the metrics collector)."""

    steps_drafting: int = 0
    steps_gated: int = 0
    drafted: int = 0
    accepted: int = 0
    gate_on: bool = True
    accept_rate: float | None = None
    last_reason: str = ""
    switches: int = 0
    budget: int = 0
    floor: float = 0.0
    propose_seconds: float = 0.0  # wall time inside the drafter's propose, all calls (its own cost per step)
    rows_refused: int = 0  # rows given no draft because the trackers refused them (bad lengths or ids)


class GatedDrafting:
    """The drafter's controller (a LoadGate, or a LoadGate capping a CostGate; under a BatchSchedule
    when given one), fed each step, with its clock, counters and log lines.

    Args:
        k: num_speculative_tokens (the most a chain may hold).
        off_above / on_below / min_accept_rate: as :class:`LoadGate`.
        cost_gate: choose each step's budget with a :class:`CostGate` fitted to this engine's step times.
        schedule: a validated batch-size schedule whose K at the running batch caps every budget (None: none).
        log_every: steps between log lines (0: never).
        clock: seconds, monotonic (``time.perf_counter``; tests pass a fake engine's clock).
    """

    def __init__(self, k: int, *, off_above: float, on_below: float | None, min_accept_rate: float, log_every: int,
                 cost_gate: bool = False, schedule: Schedule | None = None, clock=time.perf_counter):
        self.k = int(k)
        self.gate = LoadGate(off_above=off_above, on_below=on_below, budget=self.k, min_accept_rate=min_accept_rate)
        self.cost = CostGate(self.k) if cost_gate else None
        gated = Capped(self.gate, self.cost) if self.cost is not None else self.gate
        self.schedule = None if schedule is None else BatchSchedule(schedule, self.k)
        self.controller = gated if self.schedule is None else Capped(self.schedule, gated)
        self.stats = GateStats()
        self.log_every = log_every
        self.clock = clock
        self._steps = 0
        self._last_call: float | None = None
        self._budget = self._verified_budget = 0  # budget of this call / of the drafts just verified
        self.trace: Callable[[Outcome], None] | None = None  # sees each step's outcome first (gate_trace.py)

    def observe(self, drafted, accepted, *, fit: bool = True, now: float | None = None, offered=None,
                prefill: int = 0) -> None:
        """Per row ``[rows]``: tokens drafted into the step that just ran and how many were accepted. Call
        once per drafter call, after its :meth:`decide`. ``fit``: the time since the last call was one step
        (no skipped call); ``offered`` ``[rows]`` bool: rows that could draft (default all); ``prefill``:
        rows with prefill work; ``now``: the clock at the call's entry."""
        now = self.clock() if now is None else now
        seconds = None if self._last_call is None else now - self._last_call
        outcome = Outcome.of(drafted, accepted, budget=self._verified_budget, seconds=seconds, fit=fit,
                             offered=offered, prefill=prefill)
        if self.trace is not None:
            self.trace(outcome)
        self.controller.observe(outcome)
        self.stats.drafted += int(outcome.drafted.sum())
        self.stats.accepted += int(outcome.accepted.sum())
        self.stats.accept_rate = self.gate.accept_rate
        self._last_call = now
        self._verified_budget = self._budget  # this call's drafts are verified by the next step

    @property
    def floor(self) -> float:
        """This call's per-token acceptance bar (cost gate only; 0 otherwise)."""
        return self.stats.floor

    def decide(self, batch_size: int, context: float) -> Decision:
        """This step's decision; counted, and logged on a switch and every ``log_every`` steps."""
        d = self.controller.decide(BatchView(batch_size, context))
        floor = d.floor
        s = self.stats
        if d.speculate:
            s.steps_drafting += 1
        else:
            s.steps_gated += 1
        self._budget = s.budget = d.budget if d.speculate else 0
        s.floor = floor
        switched = s.gate_on != self.gate.on
        s.gate_on, s.last_reason, s.switches = self.gate.on, d.reason, self.gate.switches
        self._steps += 1
        if switched:
            logger.info("specdec gate %s: %s", "on" if self.gate.on else "off", d.reason)
        if self.log_every and self._steps % self.log_every == 0:
            rate = "n/a" if s.accept_rate is None else f"{s.accept_rate:.3f}"
            fit = self.cost.coefficients() if self.cost is not None else None
            fit = "" if fit is None else ", step fit a %.4f b %.4f d %.4f c %.4f s, floor %.3f" % (*fit, s.floor)
            calls = s.steps_drafting + s.steps_gated - 1  # propose_seconds holds the calls before this one
            logger.info("specdec drafter: %d steps drafting, %d gated off, %d drafted, %d accepted (%.3f), "
                        "gate acceptance %s, propose %.1f us/step, last: %s%s", s.steps_drafting, s.steps_gated,
                        s.drafted, s.accepted, s.accepted / s.drafted if s.drafted else 0.0, rate,
                        s.propose_seconds / calls * 1e6 if calls else 0.0, d.reason, fit)
        return d
