"""Propose: the drafters that produce DraftTrees (see :mod:`~specdec.proposers.base` for the contract).

One module per proposer: ``suffix`` (lookup in the C++ suffix automata of ``suffix_automaton``),
``draft_model``, ``heads`` (Medusa), ``eagle`` (with its EAGLE-1 and EAGLE-3 layers in
``eagle_layer`` and ``eagle3_layer``), ``hybrid`` (suffix + EAGLE merged into one calibrated tree),
``replay`` (the reference proposer for tests). Every proposer is importable from here; those that
need the compiled extension or transformers load on first use, so ``import specdec.proposers``
needs neither.
"""

from .._imports import lazy_names
from .base import Artifact, Proposer, ScoredDraft, ScoredProposer

_LAZY = {
    "ReplayProposer": "specdec.proposers.replay",
    "SuffixProposer": "specdec.proposers.suffix",
    "SuffixAutomaton": "specdec.proposers.suffix_automaton",
    "DraftModelProposer": "specdec.proposers.draft_model",
    "MedusaProposer": "specdec.proposers.heads",
    "MedusaHeads": "specdec.proposers.heads",
    "EagleProposer": "specdec.proposers.eagle",
    "HybridProposer": "specdec.proposers.hybrid",
}

__all__ = ["Artifact", "Proposer", "ScoredDraft", "ScoredProposer", *_LAZY]
__getattr__, __dir__ = lazy_names(__name__, _LAZY, tuple(__all__))
