"""Pieces shared by every training loop (Medusa heads, EAGLE layer, drafter): the held-out rule,
the learning-rate schedule and the optimiser step with its progress report."""

from __future__ import annotations

import math

import torch


def is_heldout(index, every: int):
    """Every ``every``-th record is held out (works on ints and on index tensors alike)."""
    return index % every == every - 1


def cosine_schedule(opt, total: int, warmup: int = 0):
    """Linear warm-up over ``warmup`` steps, then cosine decay to 0 at step ``total``."""
    span = max(total - warmup, 1)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return 0.5 * (1 + math.cos(math.pi * min(step - warmup, span) / span))

    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def optimizer_step(loss: torch.Tensor, opt, sched, losses: list[float], bar=None, window: int = 20, **postfix) -> None:
    """Backpropagate ``loss``, step optimiser and schedule, append it to ``losses``, and show the mean
    of the last ``window`` losses (plus ``postfix`` fields) on ``bar``."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    losses.append(loss.item())
    if bar is not None:
        recent = losses[-window:]
        bar.update(1)
        bar.set_postfix(**postfix, loss=f"{sum(recent) / len(recent):.3f}")
