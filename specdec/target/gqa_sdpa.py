"""Deprecated path (kept for one release).

Moved to :mod:`specdec.verify.gqa_sdpa`, :mod:`specdec.ops.hf_attention`.
"""

from .._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.verify.gqa_sdpa", "specdec.ops.hf_attention")
