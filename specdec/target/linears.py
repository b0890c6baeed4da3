"""Deprecated path (kept for one release).

Moved to :mod:`specdec.verify.linears`, :mod:`specdec.ops.skinny_linear`.
"""

from .._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.verify.linears", "specdec.ops.skinny_linear")
