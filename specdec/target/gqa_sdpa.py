"""Deprecated path (kept for one release).

``sdpa_forward`` moved to :mod:`specdec.ops.hf_attention`; ``GroupedSDPA`` became the attention half
of :class:`specdec.verify.patch.ForwardPatch`.
"""

import warnings

from .._compat import REMOVED_IN, moved

__getattr__, __dir__ = moved(__name__, "specdec.ops.hf_attention", "specdec.verify.patch")


def GroupedSDPA(model):  # noqa: N802 (the old class name)
    """``ForwardPatch(model)``: an SDPA model runs grouped SDPA inside ``with``."""
    from ..verify.patch import ForwardPatch

    warnings.warn(f"specdec.target.gqa_sdpa.GroupedSDPA is ForwardPatch(model) now (specdec.verify.patch); the "
                  f"old name goes away in specdec {REMOVED_IN}", DeprecationWarning, stacklevel=2)
    return ForwardPatch(model)
