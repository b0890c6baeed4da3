"""Random inputs for the tree-attention tests: batches of random trees packed into the op's layout.

Every tensor is drawn fresh from a seeded generator (never zeros), so a kernel that skips writes or
indexes wrongly shows up as a large error.
"""

from __future__ import annotations

import torch

from specdec import DraftTree


def random_parents(n: int, gen: torch.Generator) -> list[int]:
    """Parents of a random tree with n nodes (each node hangs under -1 or an earlier node)."""
    return [int(torch.randint(-1, i, (1,), generator=gen)) if i else -1 for i in range(n)]


def tree_masks(node_counts: list[int], n_max: int, gen: torch.Generator, chain: bool = False) -> torch.Tensor:
    """``int64 [B, n_max, ceil(n_max/64)]``: DraftTree ancestor masks, zero rows for padding."""
    words = (n_max + 63) // 64
    mask = torch.zeros(len(node_counts), n_max, words, dtype=torch.int64)
    for b, n in enumerate(node_counts):
        if n == 0:
            continue
        parents = list(range(-1, n - 1)) if chain else random_parents(n, gen)
        tree = DraftTree(torch.zeros(n, dtype=torch.long), torch.tensor(parents, dtype=torch.int32))
        m = tree.ancestor_mask
        mask[b, :n, : m.shape[1]] = m
    return mask


def make_case(batch, nodes, q_heads, kv_heads, head_dim, prefixes, dtype, device="cpu", seed=0,
              node_counts=None, extra_rows=3, chain=False):
    """Returns ``(q, k, v, tree_mask, prefix_lens)`` on ``device`` with random data.

    ``prefixes``: committed prefix length per request; k/v get ``max(prefix) + nodes + extra_rows``
    rows (rows past a request's tree are random too, and must be ignored). ``node_counts``: real
    nodes per request (default: all ``nodes``), the rest padded.
    """
    gen = torch.Generator().manual_seed(seed)
    counts = node_counts if node_counts is not None else [nodes] * batch
    seq = max(prefixes) + nodes + extra_rows
    q = torch.randn(batch, nodes, q_heads, head_dim, generator=gen)
    k = torch.randn(batch, seq, kv_heads, head_dim, generator=gen)
    v = torch.randn(batch, seq, kv_heads, head_dim, generator=gen)
    mask = tree_masks(counts, nodes, gen, chain=chain)
    prefix = torch.tensor(prefixes, dtype=torch.int32)
    return tuple(t.to(device=device, dtype=dtype) for t in (q, k, v)) + (mask.to(device), prefix.to(device))
