"""The loop: propose -> verify -> accept -> commit over a batch of requests.

* :mod:`~specdec.engine.decoder` -- :class:`SpeculativeDecoder`, the loop itself;
* :mod:`~specdec.control.sizer` -- how many draft nodes to verify: acceptance estimates, their
  calibration, pruning to the cost-optimal tree;
* :mod:`~specdec.estimate.verify_cost` -- the measured verify-cost curve ``c(n)``;
* :mod:`~specdec.engine.metrics` -- per-request metrics.

Importing the package loads nothing heavy; the decoder needs transformers (through the verify
adapter) and loads on first use.
"""

from .._imports import lazy_names

_LAZY = {
    "SpeculativeDecoder": "specdec.engine.decoder",
    "GenerationResult": "specdec.engine.decoder",
    "StepEvent": "specdec.engine.decoder",
    "RequestMetrics": "specdec.engine.metrics",
    "VerifyCostModel": "specdec.estimate.verify_cost",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy_names(__name__, _LAZY, tuple(__all__))
