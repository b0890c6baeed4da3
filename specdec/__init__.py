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
    verify_logits,
)
from .tree import DraftTree
from .tree import TreeBatch, pack_trees

__version__ = "0.1.0"

# Parts that need the compiled extension or transformers load on first use, so that importing
# specdec for the sampler or DraftTree stays cheap and works before the extension is built.
_LAZY = {
    "SuffixAutomaton": ("specdec.proposers.suffix_automaton", "SuffixAutomaton"),
    "SuffixProposer": ("specdec.proposers.suffix", "SuffixProposer"),
    "SpeculativeDecoder": ("specdec.engine.decoder", "SpeculativeDecoder"),
    "GenerationResult": ("specdec.engine.decoder", "GenerationResult"),
    "StepEvent": ("specdec.engine.decoder", "StepEvent"),
    "HFTarget": ("specdec.verify", "HFTarget"),
    "RequestMetrics": ("specdec.engine.metrics", "RequestMetrics"),
    "VerifyCostModel": ("specdec.engine.verify_cost", "VerifyCostModel"),
    "load_default": ("specdec.models", "load_default"),
    "tiny_model": ("specdec.models", "tiny_model"),
    "DraftModelProposer": ("specdec.proposers.draft_model", "DraftModelProposer"),
    "MedusaProposer": ("specdec.proposers.heads", "MedusaProposer"),
    "MedusaHeads": ("specdec.proposers.heads", "MedusaHeads"),
    "EagleProposer": ("specdec.proposers.eagle", "EagleProposer"),
    "LoadGate": ("specdec.serving.gate", "LoadGate"),
    "Manifest": ("specdec.artifacts", "Manifest"),
    "IncompatibleArtifactError": ("specdec.artifacts", "IncompatibleArtifactError"),
    "check_compatible": ("specdec.artifacts", "check_compatible"),
    "target_fingerprint": ("specdec.artifacts", "target_fingerprint"),
    "tokenizer_fingerprint": ("specdec.artifacts", "tokenizer_fingerprint"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'specdec' has no attribute {name!r}")


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
    *_LAZY,
]
