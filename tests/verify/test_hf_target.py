"""HFTarget: one tree forward equals per-path decoding; compaction keeps ragged batches exact."""

import pytest
import torch

from specdec import DraftTree
from specdec.models import tiny_model
from specdec.verify.hf import HFTarget

ATOL = 1e-4


@pytest.fixture(scope="module", params=["llama", "qwen2", "gpt2"])
def model(request):
    return tiny_model(request.param)


def full_logits(model, seq):
    """Reference: one uncached forward over the whole sequence, logits at every position."""
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0].float()


def test_prefill_matches_uncached_forward(model):
    target = HFTarget(model)
    prompts = [[3, 4, 5, 6, 7], [8, 9], [10]]
    state, logits, hidden = target.prefill(prompts)
    assert state.lengths == [5, 2, 1]
    for b, p in enumerate(prompts):
        torch.testing.assert_close(logits[b], full_logits(model, p)[-1], atol=ATOL, rtol=0)
        assert hidden[b].shape == (
            len(p),
            model.config.hidden_size if hasattr(model.config, "hidden_size") else model.config.n_embd,
        )


def test_tree_forward_matches_each_path(model):
    """Every node's logits equal an uncached forward over prompt + pending + its root path."""
    target = HFTarget(model)
    prompts = [[3, 4, 5, 6, 7], [8, 9]]
    state, _, _ = target.prefill(prompts)
    target.set_pending(state, [10, 11])
    trees = [
        DraftTree(torch.tensor([12, 13, 14, 15, 16, 17]), torch.tensor([-1, 0, 0, 2, -1, 4])),
        DraftTree.chain(torch.tensor([20, 21])),
    ]
    out = target.verify(state, trees)
    assert out.logits.shape == (2, 7, model.config.vocab_size)
    for b, p in enumerate(prompts):
        base = p + [state.pending[b]]
        torch.testing.assert_close(out.logits[b, 0], full_logits(model, base)[-1], atol=ATOL, rtol=0)
        tree = trees[b]
        for i in range(tree.num_nodes):
            seq = base + [int(tree.tokens[j]) for j in tree.path_to(i)]
            torch.testing.assert_close(out.logits[b, 1 + i], full_logits(model, seq)[-1], atol=ATOL, rtol=0)


def test_compaction_ragged_batch_continues_exactly(model):
    """Requests accept different path lengths (one off the first branch); next step stays exact."""
    target = HFTarget(model)
    prompts = [[3, 4, 5, 6, 7], [8, 9], [1, 2, 3]]
    state, _, _ = target.prefill(prompts)
    target.set_pending(state, [10, 11, 12])
    trees = [
        DraftTree(torch.tensor([12, 13, 14, 15]), torch.tensor([-1, 0, 0, 2])),
        DraftTree.chain(torch.tensor([20, 21])),
        DraftTree.empty(),
    ]
    target.verify(state, trees)
    target.commit(state, [[0, 2, 3], [], []], [30, 31, 32])
    assert state.lengths == [5 + 4, 2 + 1, 3 + 1]
    assert state.cache_len == max(state.lengths)
    committed = [prompts[0] + [10, 12, 14, 15], prompts[1] + [11], prompts[2] + [12]]
    out = target.verify(
        state, [DraftTree.chain(torch.tensor([40])), DraftTree.empty(), DraftTree.chain(torch.tensor([5, 6]))]
    )
    for b, seq in enumerate(committed):
        ref = full_logits(model, seq + [state.pending[b]])
        torch.testing.assert_close(out.logits[b, 0], ref[-1], atol=ATOL, rtol=0)
    ref = full_logits(model, committed[2] + [32, 5, 6])
    torch.testing.assert_close(out.logits[2, 1:3], ref[-2:], atol=ATOL, rtol=0)
    # Drop the middle request: the others continue unchanged.
    target.commit(state, [[0], [], [0, 1]], [41, 42, 43])
    target.select(state, [0, 2])
    out = target.verify(state, [DraftTree.empty(), DraftTree.empty()])
    ref0 = full_logits(model, committed[0] + [30, 40, 41])
    ref2 = full_logits(model, committed[2] + [32, 5, 6, 43])
    torch.testing.assert_close(out.logits[0, 0], ref0[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(out.logits[1, 0], ref2[-1], atol=ATOL, rtol=0)


def test_hidden_states_are_final_layer(model):
    target = HFTarget(model)
    state, _, _ = target.prefill([[3, 4, 5]])
    target.set_pending(state, [6])
    out = target.verify(state, [DraftTree.chain(torch.tensor([7, 8]))])
    with torch.inference_mode():
        torch.testing.assert_close(target.lm_head(out.hidden).float(), out.logits, atol=ATOL, rtol=0)


def test_unsupported_model_is_refused_by_feature():
    """Refusals name the feature, not the model type (tests/engine/test_architectures.py has one per feature)."""
    from transformers import AutoModelForCausalLM, FalconConfig

    cfg = FalconConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, alibi=True)
    with pytest.raises(ValueError, match="uses ALiBi"):
        HFTarget(AutoModelForCausalLM.from_config(cfg))


def test_bad_inputs_raise():
    target = HFTarget(tiny_model("llama"))
    with pytest.raises(ValueError, match="at least one token"):
        target.prefill([[]])
    with pytest.raises(ValueError, match=r"must lie in \[0, 64\)"):
        target.prefill([[1, 99]])
    state, _, _ = target.prefill([[1, 2]])
    with pytest.raises(ValueError, match="pending token"):
        target.verify(state, [DraftTree.empty()])
    with pytest.raises(TypeError, match="set_pending: tokens must hold integer token ids"):
        target.set_pending(state, [True])
    with pytest.raises(ValueError, match="set_pending: tokens contains token id 64"):
        target.set_pending(state, [64])
    target.set_pending(state, [3])
    with pytest.raises(ValueError, match="2 trees for a batch of 1"):
        target.verify(state, [DraftTree.empty(), DraftTree.empty()])
    target.verify(state, [DraftTree.chain(torch.tensor([4, 5]))])
    with pytest.raises(ValueError, match="previous verify step's rows"):
        target.verify(state, [DraftTree.empty()])
    with pytest.raises(ValueError, match="outside the tree"):
        target.commit(state, [[5]], [1])
    with pytest.raises(TypeError, match="num_nodes"):  # removed in 0.3: the target knows the last verify's size
        target.commit(state, [[0]], [1], num_nodes=3)
    with pytest.raises(ValueError, match=r"not a root-to-node path \(node 1's parent is 0, not -1\)"):
        target.commit(state, [[1]], [1])
    with pytest.raises(ValueError, match=r"next_tokens contains token id 64, outside the vocabulary \[0, 64\)"):
        target.commit(state, [[0]], [64])
    with pytest.raises(TypeError, match="next_tokens must hold integer token ids, got float 3.7"):
        target.commit(state, [[0]], [3.7])  # int() would have committed token 3
    target.commit(state, [[0, 1]], [1])
    with pytest.raises(ValueError, match="no verify step awaits it"):
        target.commit(state, [[]], [1])
    with pytest.raises(ValueError, match="no verify step awaits it"):
        target.discard(state)
    with pytest.raises(ValueError, match="attention must be"):
        HFTarget(tiny_model("llama"), attention="flash")


def test_tree_op_attention_matches_mask_path(monkeypatch):
    """attention='tree_op' (specdec's registered op) gives the 4-D-mask path's logits, and runs the op
    on the ragged step too (each request's new rows follow its own prefix, holes or not)."""
    from specdec.ops import hf_attention

    calls = []
    real = hf_attention._ta.tree_attention
    monkeypatch.setattr(
        hf_attention._ta, "tree_attention", lambda *a, **k: calls.append(a[4].tolist()) or real(*a, **k)
    )
    trees = [
        DraftTree(torch.tensor([12, 13, 14, 15]), torch.tensor([-1, 0, 0, 2])),
        DraftTree.chain(torch.tensor([20])),
    ]
    outs = []
    for mode in ("mask", "tree_op"):
        target = HFTarget(tiny_model("llama"), attention=mode)
        state, _, _ = target.prefill([[3, 4, 5], [6, 7, 8]])
        target.set_pending(state, [9, 10])
        outs.append(target.verify(state, trees).logits)
        target.commit(state, [[0, 2], []], [1, 2])
        outs.append(target.verify(state, trees).logits)  # ragged now: request 1 has 2 holes
    torch.testing.assert_close(outs[0][0, :5], outs[2][0, :5], atol=ATOL, rtol=0)
    torch.testing.assert_close(outs[0][1, :2], outs[2][1, :2], atol=ATOL, rtol=0)
    torch.testing.assert_close(outs[1][0, :5], outs[3][0, :5], atol=ATOL, rtol=0)
    torch.testing.assert_close(outs[1][1, :2], outs[3][1, :2], atol=ATOL, rtol=0)
    layers = 2
    assert calls == [[3, 3]] * layers + [[6, 4]] * layers  # prefix lengths per request, holes included
    target.commit(state, [[], []], [3, 4])
    target.verify(state, [DraftTree.empty(), DraftTree.empty()])  # no draft: SDPA with the dense mask
    assert len(calls) == 2 * layers
