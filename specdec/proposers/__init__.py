"""Propose: the drafters that produce DraftTrees (see :mod:`~specdec.proposers.base` for the contract).

One module per proposer: ``suffix`` (lookup in the C++ suffix automata of ``suffix_automaton``),
``draft_model``, ``heads`` (Medusa), ``eagle`` (with its layer in ``eagle_layer``), ``replay`` (the
reference proposer for tests). Every proposer is importable from here; those that need the
compiled extension or transformers load on first use, so ``import specdec.proposers`` needs
neither.
"""

import importlib

from .base import Artifact, Proposer, ScoredDraft, ScoredProposer

_LAZY = {
    "ReplayProposer": "specdec.proposers.replay",
    "SuffixProposer": "specdec.proposers.suffix",
    "SuffixAutomaton": "specdec.proposers.suffix_automaton",
    "DraftModelProposer": "specdec.proposers.draft_model",
    "MedusaProposer": "specdec.proposers.heads",
    "MedusaHeads": "specdec.proposers.heads",
    "EagleProposer": "specdec.proposers.eagle",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specdec.proposers' has no attribute {name!r}")


__all__ = ["Artifact", "Proposer", "ScoredDraft", "ScoredProposer", *_LAZY]
