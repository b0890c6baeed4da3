"""The drafter's counters, readable next to vLLM's ``vllm:spec_decode_*`` metrics.

``LLM.get_metrics()`` reads prometheus_client's default registry and keeps the families whose name
starts with ``vllm:`` (vllm/v1/metrics/reader.py), so the drafter registers a collector there with
``vllm:specdec_*`` families, labelled ``drafter=<id>`` so two engines in one process stay apart:

* ``vllm:specdec_steps_total{decision="draft"|"gate_off"}`` -- steps the load gate let draft or not;
* ``vllm:specdec_draft_tokens_total`` / ``vllm:specdec_accepted_tokens_total`` -- tokens drafted and
  confirmed by the tokens the engine committed next (the drafter's own count, see RowStep);
* ``vllm:specdec_gate_on`` (0/1) and ``vllm:specdec_accept_rate`` (the gate's moving average, -1 unknown);
* ``vllm:specdec_budget``: the draft tokens per row the gates allowed at the last step (the cost
  gate's choice, 0 when gated off);
* ``vllm:specdec_floor``: the acceptance probability a drafted token needed at the last step (the
  cost gate's ``c * rate``; 0 without a cost gate or before its fit);
* ``vllm:specdec_propose_seconds_total``: wall time spent inside the drafter's ``propose``, all
  steps: its own cost, to set beside the engine's step time (divide by the steps);
* ``vllm:specdec_rows_refused_total``: rows given no draft because their lengths or token ids were
  out of range (each one also logged).

It lives in the process that runs the drafter: with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` that is the
``LLM`` process; otherwise the engine-core process, whose registry ``get_metrics()`` does not see
(the log lines carry the same numbers).
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
