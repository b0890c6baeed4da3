"""The prompts ``model.generate`` prepared, as the decoder takes them: one unpadded list per row.

specdec verifies with its own right-padded cache and positions, so each left-padded row of
``input_ids [B, T]`` becomes its prompt, with its pad tokens kept for the logits processors.
Refused by name, before any forward: right padding or holes in the mask, an empty row, position
ids other than the mask's, a cache that already holds tokens, and any other model input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Model keyword arguments ``generate`` prepares itself; anything else was the caller's and is refused.
PREPARED = frozenset({"attention_mask", "position_ids", "cache", "past_key_values", "logits_to_keep", "use_cache"})


@dataclass(frozen=True)
class Prompts:
    """The batch's rows: ``prompts[b]`` without pads, ``pad_prefix[b]`` its left padding, ``width`` the
    padded length ``T`` (what ``max_length`` and length processors count)."""

    prompts: list[list[int]]
    pad_prefix: list[list[int]]
    width: int


def read_prompts(input_ids: torch.Tensor, model_kwargs: dict) -> Prompts:
    """Split ``input_ids [B, T]`` by its attention mask; ValueError naming what the verify forward cannot
    honour (see the module docstring)."""
    extra = sorted(k for k, v in model_kwargs.items() if k not in PREPARED and v is not None)
    if extra:
        raise ValueError(f"specdec's custom_generate does not pass the model input(s) {extra} to its verify "
                         "forward: it decodes from input_ids (and their attention mask) only")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[1] == 0:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"specdec's custom_generate needs input_ids of shape [batch, length >= 1], got {shape}")
    _check_cache(model_kwargs.get("cache", model_kwargs.get("past_key_values")))
    ids = input_ids.detach().cpu()
    mask = model_kwargs.get("attention_mask")
    mask = torch.ones_like(ids, dtype=torch.long) if mask is None else mask.detach().cpu().long()
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask has shape {tuple(mask.shape)}, input_ids {tuple(ids.shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (token)")
    starts = (mask.shape[1] - mask.sum(1)).tolist()
    expected = (torch.arange(mask.shape[1]).unsqueeze(0) >= torch.tensor(starts).unsqueeze(1)).long()
    if not torch.equal(mask, expected):
        row = int((mask != expected).any(1).nonzero()[0])
        raise ValueError(f"row {row} of attention_mask is not left padding ({mask[row].tolist()}): specdec needs "
                         "each row's padding before its tokens (tokenizer.padding_side = 'left'), as "
                         "model.generate does for decoder-only models")
    empty = [b for b, s in enumerate(starts) if s == mask.shape[1]]
    if empty:
        raise ValueError(f"row {empty[0]} of the batch has no token (its attention_mask is all 0)")
    _check_positions(model_kwargs.get("position_ids"), mask)
    rows = ids.tolist()
    return Prompts([r[s:] for r, s in zip(rows, starts)], [r[:s] for r, s in zip(rows, starts)], mask.shape[1])


def _check_cache(cache) -> None:
    if cache is None:
        return
    length = cache.get_seq_length() if hasattr(cache, "get_seq_length") else None
    if length is None or length > 0:
        raise ValueError("specdec's custom_generate prefills its own cache: a cache that already holds tokens "
                         "(past_key_values / cache) cannot be continued; pass the whole prompt instead")


def _check_positions(position_ids, mask: torch.Tensor) -> None:
    """Position ids must be the ones ``generate`` derives from the mask (from 0 at each row's first token)."""
    if position_ids is None:
        return
    want = (mask.cumsum(-1) - 1).clamp_min(0)
    got = position_ids.detach().cpu().long().expand_as(mask)
    if not torch.equal(got * mask, want * mask):
        raise ValueError("position_ids differ from the ones the attention mask implies (0, 1, ... from each "
                         "row's first token): specdec positions each token by its place in its own prompt")
