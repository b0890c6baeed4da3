"""Shape-only (fake) implementations of the compiled ops, so torch.compile / FakeTensor can trace them.

The extension's ``TORCH_LIBRARY(specdec, ...)`` block names this module (``set_python_module``): torch
imports it when it needs a fake implementation, and ``specdec.ops`` imports it with the extension.
"""

from __future__ import annotations

import torch

from .. import _ext
from . import skinny_linear, tree_attention


def register() -> None:
    @torch.library.register_fake("specdec::tree_attention")
    def _tree_attention(q, k, v, tree_mask, prefix_lens, scale=None):
        tree_attention.check_inputs(q, k, v, tree_mask, prefix_lens, scale)
        return torch.empty(q.shape, dtype=q.dtype, device=q.device)

    @torch.library.register_fake("specdec::skinny_linear")
    def _skinny_linear(x, weight, bias=None, half_path="auto"):
        skinny_linear.check_inputs(x, weight, bias, half_path)
        return x.new_empty((x.shape[0], weight.shape[0]))


if _ext.available():
    register()
