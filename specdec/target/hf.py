"""Deprecated path (kept for one release): moved to :mod:`specdec.verify.hf`."""

from .._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.verify.hf")
