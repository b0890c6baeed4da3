"""The verify LM head computes the same product as the module, on every row count."""

import pytest
import torch
from torch import nn

from specdec.target.lm_head import FAST_ROWS, lm_head_logits


@pytest.mark.parametrize("rows", [1, 2, 5, 9, 10, 40])
def test_matches_linear(rows):
    g = torch.Generator().manual_seed(rows)
    head = nn.Linear(48, 300, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(300, 48, generator=g))
    h = torch.randn(1, rows, 48, generator=g)
    out = lm_head_logits(head, h)
    assert out.shape == (1, rows, 300)
    torch.testing.assert_close(out, head(h), rtol=1e-5, atol=1e-4)


def test_other_heads_are_called_unchanged():
    head = nn.Linear(8, 10, bias=True)
    h = torch.randn(3, 8)
    assert 3 in FAST_ROWS
    assert torch.equal(lm_head_logits(head, h), head(h))  # a bias means the module's own path
