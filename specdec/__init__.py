"""specdec: speculative decoding as drop-in parts.

Proposers draft token trees, a tree-attention op verifies them in one target forward, and an
exact rejection sampler accepts a prefix while leaving the target's output distribution unchanged.
"""

from .sampling.params import SamplingParams, process_logits
from .proposers.base import Artifact, Proposer
from .proposers.replay import ReplayProposer
from .sampling.rejection import (
    AcceptResult,
    BatchAcceptResult,
    Rule,
    rejection_sample,
    rejection_sample_batch,
    rejection_sample_padded,
    accept_logits,
)
from .tree import DraftTree
from .tree import TreeBatch, pack_trees

from ._imports import lazy_names

__version__ = "0.3.0"

# Parts that need the compiled extension or transformers load on first use, so that importing
# specdec for the sampler or DraftTree stays cheap and works before the extension is built.
_LAZY = {
    "SuffixAutomaton": "specdec.proposers.suffix_automaton",
    "SuffixProposer": "specdec.proposers.suffix",
    "SpeculativeDecoder": "specdec.engine.decoder",
    "GenerationResult": "specdec.engine.decoder",
    "StepEvent": "specdec.engine.decoder",
    "HFTarget": "specdec.verify",
    "RequestMetrics": "specdec.engine.metrics",
    "VerifyCostModel": "specdec.estimate.verify_cost",
    "load_default": "specdec.models",
    "tiny_model": "specdec.models",
    "DraftModelProposer": "specdec.proposers.draft_model",
    "MedusaProposer": "specdec.proposers.heads",
    "MedusaHeads": "specdec.proposers.heads",
    "EagleProposer": "specdec.proposers.eagle",
    "LoadGate": "specdec.control.load_gate",
    "Manifest": "specdec.artifacts",
    "IncompatibleArtifactError": "specdec.artifacts",
    "check_compatible": "specdec.artifacts",
    "target_fingerprint": "specdec.artifacts",
    "tokenizer_fingerprint": "specdec.artifacts",
}
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
    "accept_logits",
    *_LAZY,
]

__getattr__, __dir__ = lazy_names(__name__, _LAZY, tuple(__all__))
