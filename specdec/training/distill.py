"""Distillation labels from the cached top-k of the target's next-token distribution.

Every trainer (EAGLE-3 layer, Medusa heads, drafter) learns the *target's* distribution at a
position, not the dataset's next token: on fixed data (ShareGPT) the two differ, and only the
target's choice is what verification will accept. The cache keeps the top ``k`` entries per
position (:mod:`.features`); a drafter scoring a reduced vocabulary of ``R`` tokens sees them
restricted to it and renormalised (EAGLE-3's rule), and positions whose target argmax lies outside
it carry no label (it cannot be drafted there).
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
    """Sparse soft labels over the drafting vocabulary from top-k entries.

    Args:
        topk_ids: ``LongTensor[..., k]`` token ids, best first.
        topk_p: ``[..., k]`` their target probabilities.
        table: :func:`reduced_table`.

    Returns:
        ``(index [..., k], weight [..., k], ok [...])``: drafting-vocabulary indices (0 where
        outside it, with weight 0) and the top-k mass inside the drafting vocabulary renormalised
        to 1; ``ok`` is False where the target's argmax is outside it (no label there). The
        cross-entropy of draft log-probabilities ``logp [..., R]`` is
        ``-(weight * logp.gather(-1, index)).sum(-1)``.
    """
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
