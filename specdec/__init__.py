"""specdec: speculative decoding as drop-in parts.

Proposers draft token trees, a tree-attention op verifies them in one target forward, and an
exact rejection sampler accepts a prefix while leaving the target's output distribution unchanged.
"""

from .proposers.base import Artifact, Proposer, ReplayProposer
from .tree import DraftTree
from .tree_batch import TreeBatch, pack_trees

__version__ = "0.1.0"

__all__ = ["Artifact", "DraftTree", "Proposer", "ReplayProposer", "TreeBatch", "pack_trees", "__version__"]
