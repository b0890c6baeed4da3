"""The loop: propose -> verify -> accept -> commit over a batch of requests.

* :mod:`~specdec.engine.decoder` -- :class:`SpeculativeDecoder`, the loop itself;
* :mod:`~specdec.engine.sizing` -- how many draft nodes to verify: acceptance estimates, their
  calibration, pruning to the cost-optimal tree;
* :mod:`~specdec.engine.verify_cost` -- the measured verify-cost curve ``c(n)``;
* :mod:`~specdec.engine.metrics` -- per-request metrics.

Importing the package loads nothing heavy; the decoder needs transformers (through the verify
adapter) and loads on first use.
"""

_LAZY = {
    "SpeculativeDecoder": "specdec.engine.decoder",
    "GenerationResult": "specdec.engine.decoder",
    "StepEvent": "specdec.engine.decoder",
    "RequestMetrics": "specdec.engine.metrics",
    "VerifyCostModel": "specdec.engine.verify_cost",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specdec.engine' has no attribute {name!r}")


__all__ = list(_LAZY)
