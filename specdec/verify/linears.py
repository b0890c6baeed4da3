"""Linear layers of the target for a verify step's few rows: the same products, computed the way a
CPU does them fastest.

A verify step feeds ``1 + tree size`` rows per request through every linear layer and the LM head
(SmolLM2: 211 products, 540 MB of float32 weights per step, streamed from DRAM). Through
``F.linear`` a product with 2-9 rows runs as a small-M GEMM that costs 1.2-1.5x the one-row GEMV,
and the GEMV itself reaches only about half of the DRAM bandwidth; the compiled
:func:`specdec.ops.skinny_linear` kernel reads each weight row once for all rows (measured side by
side by ``benchmarks/bench_skinny_linear.py``). Only the floating-point summation order differs
from ``F.linear``, as it already does between one-row and many-row calls.

Two entry points:

* :func:`lm_head_logits` -- the LM head product for hidden states ``[..., H]``.
* :class:`SkinnyLinears` -- a context manager that routes a model's ``nn.Linear`` layers through the
  kernel for the duration of one forward and restores them on exit, so the caller's model is
  unchanged outside specdec's own forwards.
"""

from __future__ import annotations

import torch
from torch import nn

from ..ops.skinny_linear import _eligible, linear_rows, op_available


class SkinnyLinears:
    """Route every eligible ``nn.Linear`` of ``model`` through :func:`linear_rows` inside a ``with``.

    The modules are collected once; entering sets an instance-level ``forward`` on each, exiting
    deletes it (the class's ``forward`` is used again). ``model=None``, a model with no eligible
    layer, or a missing compiled extension make this a no-op.
    """

    def __init__(self, model: nn.Module | None):
        self.modules = [m for m in model.modules() if _eligible(m)] if model is not None and op_available() else []
        self._active = False
        self._patched: list[nn.Linear] = []

    def __enter__(self) -> "SkinnyLinears":
        if self._active:
            raise RuntimeError("SkinnyLinears is not re-entrant")
        self._active = True
        # A module whose forward is already replaced on the instance (accelerate's device hooks,
        # another wrapper) is left alone: its wrapper may move tensors or do more than the product.
        self._patched = [m for m in self.modules if "forward" not in m.__dict__]
        for m in self._patched:
            m.forward = _bound_forward(m)
        return self

    def __exit__(self, *exc) -> None:
        for m in self._patched:
            m.__dict__.pop("forward", None)
        self._patched = []
        self._active = False


def _bound_forward(module: nn.Linear):
    weight, bias = module.weight, module.bias

    def forward(x: torch.Tensor) -> torch.Tensor:
        return linear_rows(x, weight, bias)

    return forward
