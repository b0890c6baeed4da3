"""The LM head for verification: the same product, computed the way a CPU does it fastest.

A verify step feeds a handful of rows (pending token + a small tree) through a ``[V, H]`` LM head
(SmolLM2: 49,152 x 576, 113 MB in fp32). Through ``F.linear`` a product with 2-8 rows runs as a
small-M GEMM that costs 2-3x the single-row GEMV on CPU (measured by
``benchmarks/bench_lm_head.py``: 7 ms for one row, 13-17 ms for 2-8), which made the *first*
drafted token the expensive one and so made short drafts a loss. Written as ``W @ h^T`` the same
product reads ``W`` once and costs about what one row costs. The result is the same matrix product
(only the floating-point summation order may differ, as it already does between 1-row and
many-row calls).
"""

from __future__ import annotations

import torch
from torch import nn

#: Row counts for which the transposed product is used on CPU (outside it F.linear is as fast).
FAST_ROWS = range(2, 10)


def lm_head_logits(lm_head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits ``[..., V]`` for hidden states ``[..., H]`` through ``lm_head``.

    Uses ``W @ h^T`` for a plain bias-free ``nn.Linear`` on CPU when the number of rows is in
    :data:`FAST_ROWS`; otherwise calls the module unchanged.
    """
    rows = hidden.numel() // hidden.shape[-1] if hidden.numel() else 0
    if (type(lm_head) is nn.Linear and lm_head.bias is None and hidden.device.type == "cpu"
            and rows in FAST_ROWS):
        flat = hidden.reshape(rows, hidden.shape[-1])
        return (lm_head.weight @ flat.T).T.reshape(*hidden.shape[:-1], lm_head.weight.shape[0])
    return lm_head(hidden)
