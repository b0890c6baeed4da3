"""Deprecated path (kept for one release): moved to :mod:`specdec.tree`."""

from ._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.tree")
