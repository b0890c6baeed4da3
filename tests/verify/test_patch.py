"""ForwardPatch: verify steps attend from grouped K/V (no repeat_kv copy) with the same result as
transformers' SDPA function, tree mode switches any model to the tree op, and the caller's model is
exactly restored after each forward, also when several threads share one model."""

import threading

import pytest
import torch

from specdec import DraftTree
from specdec.models import tiny_model
from specdec.ops import hf_attention
from specdec.verify.hf import HFTarget
from specdec.verify.patch import ForwardPatch

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
    ours, _ = hf_attention.sdpa_forward(_Module(), q, k, v, mask, scaling=0.3)
    theirs, _ = hf_sdpa.sdpa_attention_forward(_Module(), q, k, v, mask, scaling=0.3)
    assert ours.shape == theirs.shape == (2, t, 6, 16)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_masked_multi_row_query_does_not_copy_heads(monkeypatch):
    monkeypatch.setattr(hf_sdpa, "repeat_kv", lambda *a: pytest.fail("repeat_kv copied the K/V heads"))
    q, k, v, mask = _inputs(5, 23)
    hf_attention.sdpa_forward(_Module(), q, k, v, mask)


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


def test_other_attention_implementations_are_left_alone_unless_tree_mode_needs_them():
    model = tiny_model("llama")
    model.config._attn_implementation = "eager"
    with ForwardPatch(model):
        assert model.config._attn_implementation == "eager"
    with ForwardPatch(model, tree_attention=True):
        assert model.config._attn_implementation == hf_attention.ATTENTION_NAME
    assert model.config._attn_implementation == "eager"


def test_restored_on_error_and_not_reentrant():
    model = tiny_model("llama")
    switch = ForwardPatch(model, linears=model)
    with pytest.raises(ZeroDivisionError):
        with switch:
            assert model.config._attn_implementation == hf_attention.ATTENTION_NAME
            assert "forward" in model.lm_head.__dict__ or not switch.modules
            1 / 0
    assert model.config._attn_implementation == "sdpa"
    assert all("forward" not in m.__dict__ for m in model.modules()) and "_specdec_forward_patch" not in model.__dict__
    with switch:
        with pytest.raises(RuntimeError, match="not re-entrant"):
            switch.__enter__()


def test_tree_op_target_leaves_the_callers_model_as_it_was():
    """attention='tree_op' used to switch the caller's model for good; now only during forwards."""
    model = tiny_model("llama")
    target = HFTarget(model, attention="tree_op")
    state, logits, _ = target.prefill([[3, 4, 5]])
    target.set_pending(state, [int(logits.argmax())])
    target.verify(state, [DraftTree.from_paths([[6, 7], [8]])])
    assert model.config._attn_implementation == "sdpa"
    assert not any(k.startswith("_specdec") for k in model.__dict__)


def test_one_patch_refuses_a_second_thread_with_a_clear_error():
    model = tiny_model("llama")
    patch, errors, inside, release = ForwardPatch(model), [], threading.Event(), threading.Event()

    def hold():
        with patch:
            inside.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(5)
    try:
        with pytest.raises(RuntimeError, match="one decoder .*per thread"):
            patch.__enter__()
    finally:
        release.set()
        t.join()
    assert not errors and model.config._attn_implementation == "sdpa"


def test_patches_over_one_shared_model_share_the_state_across_threads():
    """The first one in switches the model, the last one out restores it; a tree-mode entrant switches
    a model the first left alone, for the others too."""
    model = tiny_model("llama")
    model.config._attn_implementation = "eager"
    mask_mode, tree_mode = ForwardPatch(model, linears=model), ForwardPatch(model, tree_attention=True)
    first_in, second_done, seen = threading.Event(), threading.Event(), []

    def first():
        with mask_mode:
            seen.append(model.config._attn_implementation)
            first_in.set()
            second_done.wait(5)
            seen.append(model.config._attn_implementation)  # still switched: the tree entrant left first

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(5)
    with tree_mode:
        seen.append(model.config._attn_implementation)
    second_done.set()
    t.join()
    assert seen == ["eager", hf_attention.ATTENTION_NAME, hf_attention.ATTENTION_NAME]
    assert model.config._attn_implementation == "eager"
    assert all("forward" not in m.__dict__ for m in model.modules()) and "_specdec_forward_patch" not in model.__dict__


def test_separate_targets_over_one_model_decode_in_parallel_threads():
    """Targets built while others decode over the same model (their construction checks read the
    model too), in mask and tree-op modes, repeated: the interleavings differ from run to run."""
    model = tiny_model("llama")
    prompts = [[3, 4, 5, 6 + i] for i in range(4)]
    alone = [_greedy(HFTarget(model), p) for p in prompts]
    for _ in range(5):
        results, errors = [None] * len(prompts), []

        def work(i, mode):
            try:
                results[i] = _greedy(HFTarget(model, attention=mode), prompts[i])
            except Exception as exc:  # noqa: BLE001 (reported below)
                errors.append(repr(exc))

        threads = [threading.Thread(target=work, args=(i, ("mask", "tree_op")[i % 2])) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and results == alone
    assert model.config._attn_implementation == "sdpa"


def _greedy(target, prompt, steps=12):
    state, logits, _ = target.prefill([prompt])
    out = [int(logits.argmax())]
    for _ in range(steps):
        target.set_pending(state, out[-1:])
        verified = target.verify(state, [DraftTree.chain(torch.tensor([out[-1], 5]))])
        best = verified.logits[0].argmax(-1).tolist()
        path = [0] if best[0] == out[-1] else []
        if path and best[1] == 5:
            path = [0, 1]
        target.commit(state, [path], [best[len(path)]])
        out += [out[-1], 5][: len(path)] + [best[len(path)]]
    return out


def test_compiled_models_are_refused_by_name():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="torch.compile'd"):
        HFTarget(torch.compile(model))
    model.model.layers[0] = torch.compile(model.model.layers[0])
    with pytest.raises(ValueError, match="model.layers.0 is compiled"):
        HFTarget(model)
