"""Which cache rows each fed token may attend to, as the 4-D masks a transformers model takes as given.

Layout (see :mod:`specdec.verify.cache`): request ``b`` owns cache rows ``[0, lengths[b])``, the
position of row ``r`` being ``r``; a verify step writes its ``T = 1 + N`` new rows (the pending
token, then the tree nodes) at ``[lengths[b], lengths[b] + T)``, whatever the other requests'
lengths, so the rows after them are holes. A query sees its request's committed rows and the new
rows of its ancestors and itself.

Sliding windows are applied by *position*, not by row: a key at position ``k`` is visible from a
query at position ``q`` only if ``q - k < W`` (transformers' convention), so a tree node at depth
``d`` sees the last ``W - d`` committed positions. Every cache row is kept (sliding layers too) and
the window lives only in the mask, so compaction moves rows the same way on every layer.

A model whose layers differ in their window (Gemma 2/3, Qwen2 with ``use_sliding_window``) takes a
mapping ``{layer_type: mask}``; transformers' hybrid models use a prepared mapping as given.
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
    """``LongTensor[B, 1 + N]``: the pending token at ``lengths[b]``, node i at ``lengths[b] + depth(i)``.
    Padded nodes take the pending token's position: they see only themselves, and a position past
    the model's last one must never reach a learned position table."""
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
    """``LongTensor[B, S + T]``: the position of each key row after the step's write (row ``r`` below
    ``lengths[b]`` is at ``r``; the new rows at their tokens' positions; holes keep their row index,
    they are hidden anyway)."""
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
    """The ``attention_mask`` argument for the model: one 4-D mask when every layer sees the same keys
    in this step (no window hides any, or all layers share one window), else ``{layer_type: mask}``.
    ``additive`` turns bool ``[B, T, K]`` into the model's ``[B, 1, T, K]`` mask. ``full_layers=False``
    gives full-attention layers None (tree-op mode: they run the op) and returns None when no layer
    needs a mask."""
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
