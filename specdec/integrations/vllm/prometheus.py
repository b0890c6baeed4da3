"""The drafter's counters as ``vllm:specdec_*`` prometheus families beside vLLM's own metrics.

``LLM.get_metrics()`` reads prometheus_client's default registry (families named ``vllm:*``), so
the drafter registers a collector there, labelled ``drafter=<id>`` so two engines in one process
stay apart. It lives in the process that runs the drafter (the engine core unless
``VLLM_ENABLE_V1_MULTIPROCESSING=0``). The families are listed in docs/vllm.md ("The cost gate").
"""

from __future__ import annotations

import weakref


class DrafterCollector:
    """A prometheus collector over a :class:`~specdec.integrations.vllm.gate.GateStats` (no state of its own)."""

    def __init__(self, stats, label: str):
        self._stats = weakref.ref(stats)
        self.label = label

    def describe(self):
        return []  # no names claimed: a second engine in the process registers its own labelled series

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self._stats()
        if stats is None:
            return
        steps = CounterMetricFamily("vllm:specdec_steps", "Steps by load-gate decision", labels=["drafter", "decision"])
        steps.add_metric([self.label, "draft"], stats.steps_drafting)
        steps.add_metric([self.label, "gate_off"], stats.steps_gated)
        yield steps
        for name, doc, value in (
            ("vllm:specdec_draft_tokens", "Tokens drafted by specdec", stats.drafted),
            ("vllm:specdec_accepted_tokens", "Drafted tokens confirmed by the committed tokens", stats.accepted),
            ("vllm:specdec_propose_seconds", "Seconds spent inside the drafter's propose", stats.propose_seconds),
            ("vllm:specdec_rows_refused", "Rows given no draft: lengths or token ids out of range", stats.rows_refused),
        ):
            fam = CounterMetricFamily(name, doc, labels=["drafter"])
            fam.add_metric([self.label], value)
            yield fam
        on = GaugeMetricFamily("vllm:specdec_gate_on", "1 while the load gate lets the drafter draft",
                               labels=["drafter"])
        on.add_metric([self.label], 1.0 if stats.gate_on else 0.0)
        yield on
        rate = GaugeMetricFamily("vllm:specdec_accept_rate", "The gate's moving acceptance (-1: not enough seen)",
                                 labels=["drafter"])
        rate.add_metric([self.label], -1.0 if stats.accept_rate is None else stats.accept_rate)
        yield rate
        budget = GaugeMetricFamily("vllm:specdec_budget", "Draft tokens per row allowed this step (0: gated off)",
                                   labels=["drafter"])
        budget.add_metric([self.label], float(stats.budget))
        yield budget
        floor = GaugeMetricFamily("vllm:specdec_floor", "Acceptance probability a drafted token needed this step",
                                  labels=["drafter"])
        floor.add_metric([self.label], float(stats.floor))
        yield floor


def register(stats, label: str):
    """Register a collector for ``stats`` in prometheus_client's default registry; returns an unregister
    callable (also run when ``stats`` is garbage collected). Returns None when prometheus_client is absent."""
    try:
        from prometheus_client import REGISTRY
    except ImportError:
        return None
    collector = DrafterCollector(stats, label)
    REGISTRY.register(collector)

    def unregister():
        try:
            REGISTRY.unregister(collector)
        except KeyError:
            pass  # already unregistered

    weakref.finalize(stats, unregister)
    return unregister
