"""Deprecated path (kept for one release): moved to :mod:`specdec.sampling.params`, :mod:`specdec.checks`."""

from ._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.sampling.params", "specdec.checks")
