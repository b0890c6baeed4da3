"""Deprecated path (kept for one release).

``linear_rows`` and ``lm_head_logits`` moved to :mod:`specdec.ops.skinny_linear`; ``SkinnyLinears``
became the linear half of :class:`specdec.verify.patch.ForwardPatch`.
"""

import warnings

from .._compat import REMOVED_IN, moved

__getattr__, __dir__ = moved(__name__, "specdec.ops.skinny_linear", "specdec.verify.patch")


def SkinnyLinears(model):  # noqa: N802 (the old class name)
    """``ForwardPatch(model, linears=model)``: the model's linears through the skinny kernel inside ``with``."""
    from ..verify.patch import ForwardPatch

    warnings.warn(f"specdec.target.linears.SkinnyLinears is ForwardPatch(model, linears=model) now "
                  f"(specdec.verify.patch); the old name goes away in specdec {REMOVED_IN}", DeprecationWarning,
                  stacklevel=2)
    return ForwardPatch(model, linears=model)
