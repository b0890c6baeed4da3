"""Propose: the drafters that produce DraftTrees (see :mod:`~specdec.proposers.base` for the contract).

One module per proposer (``suffix``, ``draft_model``, ``heads``, ``eagle`` with its layers, ``hybrid``,
``replay`` for tests); all importable from here, loaded on first use.
"""

from .._imports import lazy_names
from .base import Artifact, Proposer, ScoredDraft, ScoredProposer

_LAZY = {
    "ReplayProposer": "specdec.proposers.replay",
    "SuffixProposer": "specdec.proposers.suffix",
    "SuffixDrafting": "specdec.proposers.suffix_options",
    "SuffixGlobalCache": "specdec.proposers.suffix_options",
    "SuffixCalibration": "specdec.proposers.suffix_options",
    "SuffixAutomaton": "specdec.proposers.suffix_automaton",
    "DraftModelProposer": "specdec.proposers.draft_model",
    "MedusaProposer": "specdec.proposers.heads",
    "MedusaHeads": "specdec.proposers.heads",
    "EagleProposer": "specdec.proposers.eagle",
    "HybridProposer": "specdec.proposers.hybrid",
}

__all__ = ["Artifact", "Proposer", "ScoredDraft", "ScoredProposer", *_LAZY]
__getattr__, __dir__ = lazy_names(__name__, _LAZY, tuple(__all__))
