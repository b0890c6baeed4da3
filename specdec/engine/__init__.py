"""The loop (:mod:`~specdec.engine.decoder`) and its per-request metrics (:mod:`~specdec.engine.metrics`);
the decoder needs transformers and loads on first use.
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
