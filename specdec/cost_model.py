"""Deprecated path (kept for one release).

Moved to :mod:`specdec.engine.sizing`, :mod:`specdec.engine.verify_cost`.
"""

from ._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.engine.sizing", "specdec.engine.verify_cost")
