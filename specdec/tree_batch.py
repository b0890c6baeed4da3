"""Several DraftTrees padded into one batch, the layout a batched verify forward consumes.

Requests in a batch draft trees of different sizes; the verify forward and the tree-attention op
want rectangular tensors, so trees are padded to the largest size ``N``. Padding nodes have an
all-zero ancestor-mask row (the tree-attention contract's marker for "ignore this row"), token 0,
parent -1 and ``valid = False``; their outputs may hold any value and are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .tree import DraftTree


@dataclass(frozen=True)
class TreeBatch:
    """Padded batch of ``B`` trees.

    Attributes:
        trees: the original trees (length ``B``).
        tokens: ``LongTensor[B, N]`` drafted tokens, 0 in padding.
        parents: ``IntTensor[B, N]`` parent indices, -1 in padding.
        position_offsets: ``LongTensor[B, N]`` offset from each request's first uncommitted
            position, 0 in padding.
        ancestor_mask: ``int64[B, N, ceil(N/64)]`` packed ancestor bits, all-zero rows in padding.
        sizes: ``IntTensor[B]`` number of real nodes per tree.
        valid: ``BoolTensor[B, N]`` True for real nodes.
    """

    trees: tuple[DraftTree, ...]
    tokens: torch.Tensor
    parents: torch.Tensor
    position_offsets: torch.Tensor
    ancestor_mask: torch.Tensor
    sizes: torch.Tensor
    valid: torch.Tensor

    @property
    def max_nodes(self) -> int:
        return int(self.tokens.shape[1])

    def __len__(self) -> int:
        return len(self.trees)


def pack_trees(trees: Sequence[DraftTree], device=None) -> TreeBatch:
    """Pad ``trees`` to the largest size and stack them (see :class:`TreeBatch`).

    Raises:
        ValueError: for an empty list or a non-DraftTree element.
    """
    if len(trees) == 0:
        raise ValueError("pack_trees needs at least one DraftTree")
    for i, t in enumerate(trees):
        if not isinstance(t, DraftTree):
            raise ValueError(f"pack_trees element {i} is a {type(t).__name__}, expected DraftTree")
    devices = {t.device for t in trees}
    if len(devices) > 1:
        raise ValueError(f"pack_trees got trees on different devices: {sorted(str(d) for d in devices)}")
    device = torch.device(device) if device is not None else trees[0].device
    B = len(trees)
    N = max(t.num_nodes for t in trees)
    W = (N + 63) // 64
    tokens = torch.zeros(B, N, dtype=torch.long)
    parents = torch.full((B, N), -1, dtype=torch.int32)
    offsets = torch.zeros(B, N, dtype=torch.long)
    mask = torch.zeros(B, N, W, dtype=torch.int64)
    sizes = torch.zeros(B, dtype=torch.int32)
    for b, t in enumerate(trees):
        n = t.num_nodes
        sizes[b] = n
        if n == 0:
            continue
        tokens[b, :n] = t.tokens.cpu()
        parents[b, :n] = t.parents.cpu()
        offsets[b, :n] = t.position_offsets.cpu()
        mask[b, :n, : t.ancestor_mask.shape[1]] = t.ancestor_mask.cpu()
    valid = torch.arange(N).unsqueeze(0) < sizes.unsqueeze(1)
    return TreeBatch(
        trees=tuple(trees),
        tokens=tokens.to(device),
        parents=parents.to(device),
        position_offsets=offsets.to(device),
        ancestor_mask=mask.to(device),
        sizes=sizes.to(device),
        valid=valid.to(device),
    )
