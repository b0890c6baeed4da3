"""The load gate inside the drafter: each step, draft or not from the running batch and recent acceptance.

vLLM V1 removed batch-size-based disabling of speculation (``speculative_disable_by_batch_size``)
and its replacement schedule (``num_speculative_tokens_per_batch_size``) is not applied to
``custom_class`` drafters, so near saturation every verified draft token displaces a real one.
:class:`GatedDrafting` puts specdec's :class:`~specdec.serving.gate.LoadGate` there: the batch size is
the number of rows vLLM passes (its running batch this step), acceptance is what the drafter saw
confirmed, and a "gate off" step returns no drafts (vLLM then verifies nothing extra).
Decisions and acceptance are counted in :class:`GateStats` (exported as ``vllm:specdec_*``
metrics, :mod:`.metrics`) and logged every ``log_every`` steps on logger ``specdec.vllm``.
"""

from __future__ import annotations

import dataclasses
import logging

from specdec.serving.gate import GateDecision, LoadGate

logger = logging.getLogger("specdec.vllm")


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


class GatedDrafting:
    """One LoadGate per drafter, fed each step.

    Args:
        k: num_speculative_tokens (the most a chain may hold).
        off_above / on_below / min_accept_rate: as :class:`LoadGate`.
        log_every: steps between log lines (0: never).
    """

    def __init__(self, k: int, *, off_above: float, on_below: float | None, min_accept_rate: float, log_every: int):
        self.k = int(k)
        self.gate = LoadGate(off_above=off_above, on_below=on_below, budget=self.k, min_accept_rate=min_accept_rate)
        self.stats = GateStats()
        self.log_every = log_every
        self._steps = 0

    def observe(self, drafted: int, accepted: int) -> None:
        """Acceptance confirmed this step for the drafts of earlier steps."""
        self.gate.observe(drafted, accepted)
        self.stats.drafted += drafted
        self.stats.accepted += accepted
        self.stats.accept_rate = self.gate.accept_rate

    def decide(self, batch_size: int, context: float) -> GateDecision:
        """This step's decision; counted, and logged on a switch and every ``log_every`` steps."""
        d = self.gate.decide(batch_size, context)
        s = self.stats
        if d.speculate:
            s.steps_drafting += 1
        else:
            s.steps_gated += 1
        switched = s.gate_on != self.gate.on
        s.gate_on, s.last_reason, s.switches = self.gate.on, d.reason, self.gate.switches
        self._steps += 1
        if switched:
            logger.info("specdec gate %s: %s", "on" if self.gate.on else "off", d.reason)
        if self.log_every and self._steps % self.log_every == 0:
            rate = "n/a" if s.accept_rate is None else f"{s.accept_rate:.3f}"
            logger.info("specdec drafter: %d steps drafting, %d gated off, %d drafted, %d accepted (%.3f), "
                        "gate acceptance %s, last: %s", s.steps_drafting, s.steps_gated, s.drafted, s.accepted,
                        s.accepted / s.drafted if s.drafted else 0.0, rate, d.reason)
        return d
