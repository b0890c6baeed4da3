"""A reduced drafting vocabulary (FR-Spec): the token ids a trained drafter scores, and their rows
of the target's LM head. Shared by the Medusa heads and the EAGLE-style layer.

Drafting over ``R << V`` frequent tokens narrows what is drafted, never what is verified, so it
cannot change the output; ids outside ``[0, V)`` would silently index other rows, hence the checks.
"""

from __future__ import annotations

import torch


def check_vocab_ids(vocab_ids) -> torch.Tensor | None:
    """``LongTensor[R]`` of distinct ids (or None for the full vocabulary); ValueError otherwise."""
    if vocab_ids is None:
        return None
    vocab_ids = torch.as_tensor(vocab_ids, dtype=torch.long)
    if vocab_ids.dim() != 1 or vocab_ids.numel() == 0 or vocab_ids.unique().numel() != vocab_ids.numel():
        raise ValueError("vocab_ids must be a non-empty 1-D tensor of distinct token ids")
    if int(vocab_ids.min()) < 0:
        raise ValueError(f"vocab_ids must be >= 0, got {int(vocab_ids.min())}")
    return vocab_ids


def lm_rows(lm_weight: torch.Tensor, vocab_ids: torch.Tensor | None) -> torch.Tensor:
    """The LM-head rows drafted: ``[R, H]`` (reduced) or ``lm_weight`` itself ``[V, H]``."""
    if vocab_ids is None:
        return lm_weight
    if int(vocab_ids.max()) >= lm_weight.shape[0]:
        raise ValueError(f"vocab_ids reach id {int(vocab_ids.max())} but the LM head has {lm_weight.shape[0]} rows")
    return lm_weight[vocab_ids.to(lm_weight.device)]
