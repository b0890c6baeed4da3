"""Proposers: the drafters that produce DraftTrees (see base.py for the contract).

``SuffixProposer`` (C++ lookup), ``DraftModelProposer`` and the trained heads (``MedusaProposer`` in
``specdec.proposers.heads``, ``EagleProposer`` in ``specdec.proposers.eagle``) live in their own
modules and are imported from there (``specdec.proposers.suffix`` ...), so importing this package
needs neither the compiled extension nor transformers.
"""

from .base import Artifact, Proposer, ReplayProposer

__all__ = ["Artifact", "Proposer", "ReplayProposer"]
