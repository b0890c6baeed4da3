"""Deprecated path (kept for one release): moved to :mod:`specdec.proposers.suffix_automaton`."""

from ._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.proposers.suffix_automaton")
