"""specdec: speculative decoding as drop-in parts.

Proposers draft token trees, a tree-attention op verifies them in one target forward, and an
exact rejection sampler accepts a prefix while leaving the target's output distribution unchanged.
"""

from .logits import SamplingParams, process_logits
from .proposers.base import Artifact, Proposer, ReplayProposer
from .sampling import (
    AcceptResult,
    BatchAcceptResult,
    Rule,
    rejection_sample,
    rejection_sample_batch,
    rejection_sample_padded,
    verify_logits,
)
from .tree import DraftTree
from .tree_batch import TreeBatch, pack_trees

__version__ = "0.1.0"

__all__ = [
    "AcceptResult",
    "Artifact",
    "BatchAcceptResult",
    "DraftTree",
    "Proposer",
    "ReplayProposer",
    "Rule",
    "SamplingParams",
    "TreeBatch",
    "__version__",
    "pack_trees",
    "process_logits",
    "rejection_sample",
    "rejection_sample_batch",
    "rejection_sample_padded",
    "verify_logits",
]
