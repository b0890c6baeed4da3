"""The optimiser step shared by every training loop (heads, drafter), with its progress report."""

from __future__ import annotations

import torch


def optimizer_step(loss: torch.Tensor, opt, sched, losses: list[float], bar=None, window: int = 20, **postfix) -> None:
    """Backpropagate ``loss``, step optimiser and schedule, record the loss, update ``bar``.

    ``losses`` grows by one value; the progress bar shows the mean of the last ``window`` losses
    (one step's loss is too noisy to read) plus any ``postfix`` fields (e.g. the epoch).
    """
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    losses.append(loss.item())
    if bar is not None:
        recent = losses[-window:]
        bar.update(1)
        bar.set_postfix(**postfix, loss=f"{sum(recent) / len(recent):.3f}")
