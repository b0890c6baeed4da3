"""Proposers: the drafters that produce DraftTrees (see base.py for the contract)."""

from .base import Artifact, Proposer, ReplayProposer

__all__ = ["Artifact", "Proposer", "ReplayProposer"]
