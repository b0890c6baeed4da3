"""Distillation labels from the cached top-k of the target's next-token distribution.

Trainers learn the target's distribution, not the dataset's next token (only the target's choice is
accepted). The cache keeps the top ``k`` per position (:mod:`.features`); a reduced vocabulary sees them
restricted and renormalised, and positions whose target argmax lies outside carry no label.
"""

from __future__ import annotations

import torch


def reduced_table(vocab_ids: torch.Tensor | None, vocab_size: int, device=None) -> torch.Tensor:
    """``LongTensor[V]``: token id -> drafting-vocabulary index, ``-1`` outside it (identity when None)."""
    if vocab_ids is None:
        return torch.arange(vocab_size, device=device)
    table = torch.full((vocab_size,), -1, dtype=torch.long, device=device)
    table[vocab_ids.to(device)] = torch.arange(vocab_ids.numel(), device=device)
    return table


def soft_targets(topk_ids: torch.Tensor, topk_p: torch.Tensor, table: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sparse soft labels from ``topk_ids`` (long ``[..., k]``, best first) and ``topk_p`` through
    ``table``: ``(index, weight [..., k], ok [...])``, indices 0 / weight 0 outside the vocabulary, the
    inside mass renormalised; ``ok`` False where the argmax is outside. CE of ``logp [..., R]`` is
    ``-(weight * logp.gather(-1, index)).sum(-1)``."""
    red = table[topk_ids]
    inside = red >= 0
    w = topk_p.float() * inside
    mass = w.sum(-1, keepdim=True)
    ok = inside[..., 0] & (mass[..., 0] > 0)
    return red.clamp(min=0), w / mass.clamp(min=1e-12), ok


def kd_loss(logits: torch.Tensor, topk_ids: torch.Tensor, topk_p: torch.Tensor) -> torch.Tensor:
    """Per-row cross-entropy ``-sum_i p_i log softmax(logits)[id_i]`` over the top-k entries,
    renormalised to sum to 1 (full-vocabulary students: the drafter). ``logits [n, V]``, returns ``[n]``."""
    p = topk_p.float()
    p = p / p.sum(-1, keepdim=True).clamp(min=1e-12)
    logp = torch.log_softmax(logits.float(), -1).gather(-1, topk_ids)
    return -(p * logp).sum(-1)
