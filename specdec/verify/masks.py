"""Which cache rows each fed token may attend to, as the 4-D masks a transformers model takes as given.

Layout as in :mod:`specdec.verify.cache`; a query sees its request's committed rows and the new rows
of its ancestors and itself. Sliding windows apply by position (key ``k`` visible from query ``q`` iff
``q - k < W``) and live only in the mask. Models whose layers differ in their window take
``{layer_type: mask}``.
"""

from __future__ import annotations

import torch

from ..tree import TreeBatch, unpack_mask
from .capabilities import TargetFeatures


def prefill_visibility(lens: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompts: bool ``[B, T, T]`` (causal over the prompt's own tokens; padded rows
    see themselves, which keeps their softmax finite) and positions ``[B, T]`` (``0 .. T - 1``)."""
    B, T = len(lens), max(lens)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    valid = torch.arange(T).unsqueeze(0) < torch.tensor(lens).unsqueeze(1)  # [B, T] keys
    allowed = (causal.unsqueeze(0) & valid.unsqueeze(1)) | torch.eye(T, dtype=torch.bool).unsqueeze(0)
    return allowed, torch.arange(T).unsqueeze(0).expand(B, T)


def step_positions(lengths: torch.Tensor, batch: TreeBatch) -> torch.Tensor:
    """``LongTensor[B, 1 + N]``: the pending token at ``lengths[b]``, node i at ``lengths[b] + depth(i)``,
    padded nodes at the pending token's position (never past the model's last)."""
    offsets = torch.where(batch.valid.cpu(), 1 + batch.position_offsets.cpu(), 0)
    return lengths.unsqueeze(1) + torch.cat([torch.zeros(len(batch), 1, dtype=torch.long), offsets], dim=1)


def step_visibility(lengths: torch.Tensor, cache_rows: int, batch: TreeBatch) -> torch.Tensor:
    """bool ``[B, T, S + T]`` for a verify step over a cache of ``S = cache_rows`` rows."""
    B, N = len(batch), batch.max_nodes
    T = 1 + N
    anc = unpack_mask(batch.ancestor_mask.cpu(), N) if N else torch.zeros(B, 0, 0, dtype=torch.bool)
    anc = anc | (torch.eye(N, dtype=torch.bool).unsqueeze(0) & ~batch.valid.cpu().unsqueeze(2))  # padding: self
    new = torch.zeros(B, T, T, dtype=torch.bool)
    new[:, :, 0] = True  # every row sees the pending token
    new[:, 1:, 1:] = anc
    allowed = torch.zeros(B, T, cache_rows + T, dtype=torch.bool)
    allowed[:, :, :cache_rows] = (torch.arange(cache_rows).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(1)
    cols = (lengths.unsqueeze(1) + torch.arange(T)).unsqueeze(1).expand(B, T, T)
    return allowed.scatter_(2, cols, new)


def key_positions(lengths: torch.Tensor, cache_rows: int, positions: torch.Tensor) -> torch.Tensor:
    """``LongTensor[B, S + T]``: each key row's position after the step's write (holes keep their row index)."""
    B, T = positions.shape
    pos = torch.arange(cache_rows + T).unsqueeze(0).repeat(B, 1)
    return pos.scatter_(1, lengths.unsqueeze(1) + torch.arange(T), positions)


def windowed(allowed: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """``allowed`` restricted to keys less than ``window`` positions behind the query."""
    if window is None:
        return allowed
    return allowed & (q_pos.unsqueeze(2) - k_pos.unsqueeze(1) < window)


def window_binds(features: TargetFeatures, q_pos: torch.Tensor) -> bool:
    """Some sliding layer's window hides a key of this step (a query at position ``q`` sees
    positions ``0 .. q``, so no window ``W > max(q)`` hides anything)."""
    windows = [w for w in features.windows if w is not None]
    return bool(windows) and int(q_pos.max()) >= min(windows)


def model_masks(features: TargetFeatures, allowed: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor,
                additive, *, full_layers: bool = True):
    """The model's ``attention_mask``: one 4-D mask when every layer sees the same keys, else
    ``{layer_type: mask}`` (``additive``: bool ``[B, T, K]`` -> ``[B, 1, T, K]``). ``full_layers=False``
    (tree-op mode) gives full layers None, and None when no layer needs a mask."""
    if not window_binds(features, q_pos):
        return additive(allowed) if full_layers else None
    if not features.mixed:
        return additive(windowed(allowed, q_pos, k_pos, features.windows[0]))
    out = {}
    for layer_type in dict.fromkeys(features.layer_types):
        window = features.window_of(layer_type)
        out[layer_type] = (additive(windowed(allowed, q_pos, k_pos, window))
                           if window is not None or full_layers else None)
    return out
