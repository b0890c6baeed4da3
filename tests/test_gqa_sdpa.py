"""GroupedSDPA: verify steps attend from grouped K/V (no repeat_kv copy), with the same result as
transformers' SDPA function, and the caller's model configuration is restored after each forward."""

import pytest
import torch

from specdec import DraftTree
from specdec.models import tiny_model
from specdec.verify import gqa_sdpa
from specdec.verify.hf import HFTarget

transformers = pytest.importorskip("transformers")
hf_sdpa = pytest.importorskip("transformers.integrations.sdpa_attention")


class _Module:
    num_key_value_groups = 3
    is_causal = True
    training = False


def _inputs(t: int, s: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 6, t, 16, generator=gen)
    k = torch.randn(2, 2, s, 16, generator=gen)
    v = torch.randn(2, 2, s, 16, generator=gen)
    allowed = torch.rand(2, 1, t, s, generator=gen) < 0.7
    allowed[..., 0] = True  # every query sees at least one key
    mask = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    return q, k, v, mask


@pytest.mark.parametrize("t", [1, 5])
@pytest.mark.parametrize("masked", [True, False])
def test_matches_transformers_sdpa(t, masked):
    q, k, v, mask = _inputs(t, 23)
    mask = mask if masked else None
    ours, _ = gqa_sdpa.sdpa_forward(_Module(), q, k, v, mask, scaling=0.3)
    theirs, _ = hf_sdpa.sdpa_attention_forward(_Module(), q, k, v, mask, scaling=0.3)
    assert ours.shape == theirs.shape == (2, t, 6, 16)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_masked_multi_row_query_does_not_copy_heads(monkeypatch):
    monkeypatch.setattr(hf_sdpa, "repeat_kv", lambda *a: pytest.fail("repeat_kv copied the K/V heads"))
    q, k, v, mask = _inputs(5, 23)
    gqa_sdpa.sdpa_forward(_Module(), q, k, v, mask)


def test_verify_runs_grouped_and_restores_the_model(monkeypatch):
    model = tiny_model("llama", heads=4, kv_heads=2)
    target = HFTarget(model)
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(k.get("enable_gqa")) or real(*a, **k))
    state, _, _ = target.prefill([[3, 4, 5, 6], [7, 8]])
    target.set_pending(state, [9, 10])
    calls.clear()
    target.verify(state, [DraftTree.chain(torch.tensor([11, 12])), DraftTree.chain(torch.tensor([13]))])
    assert calls == [True] * model.config.num_hidden_layers
    assert model.config._attn_implementation == "sdpa"


def test_other_attention_implementations_are_left_alone():
    model = tiny_model("llama")
    model.config._attn_implementation = "eager"
    with gqa_sdpa.GroupedSDPA(model):
        assert model.config._attn_implementation == "eager"


def test_restored_on_error_and_not_reentrant():
    model = tiny_model("llama")
    switch = gqa_sdpa.GroupedSDPA(model)
    with pytest.raises(ZeroDivisionError):
        with switch:
            assert model.config._attn_implementation == gqa_sdpa.NAME
            1 / 0
    assert model.config._attn_implementation == "sdpa"
    with switch:
        with pytest.raises(RuntimeError, match="not re-entrant"):
            switch.__enter__()
