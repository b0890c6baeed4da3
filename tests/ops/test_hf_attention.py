"""The tree-attention function registered with transformers' AttentionInterface, on a tiny random
Llama: one tree forward must give, at every node, the logits of running that node's root-to-node
path after the prompt with ordinary causal attention."""

from __future__ import annotations

import copy

import pytest
import torch

from specdec import DraftTree
from specdec.ops import hf_attention

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model():
    config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128,
    )
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(config).eval()
    hf_attention.enable(m)
    return m


def _depths(parents):
    depth = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    return depth


def _path(parents, i):
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]


@torch.inference_mode()
def _prefill(model, prompt):
    cache = transformers.DynamicCache(config=model.config)
    out = model(input_ids=prompt, cache=cache, use_cache=True)
    return cache, out.logits


@pytest.mark.parametrize("add_root", [False, True])
def test_tree_forward_matches_per_path_causal(model, add_root, monkeypatch):
    calls = []
    op = hf_attention._ta.tree_attention
    monkeypatch.setattr(hf_attention._ta, "tree_attention", lambda *a, **k: calls.append(1) or op(*a, **k))
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 97, (1, 11), generator=gen)
    parents = [-1, 0, 0, 1, -1, 3, 2, 4]
    tokens = torch.randint(0, 97, (len(parents),), generator=gen)
    tree = DraftTree(tokens, torch.tensor(parents, dtype=torch.int32))
    p = prompt.shape[1]
    cache, _ = _prefill(model, prompt[:, :-1] if add_root else prompt)
    prefix = cache.get_seq_length()
    depth = torch.tensor(_depths(parents))
    if add_root:  # the last prompt token is fed as the tree's root (a pending token)
        ids = torch.cat([prompt[:, -1], tokens]).unsqueeze(0)
        pos = torch.cat([torch.tensor([prefix]), prefix + 1 + depth]).unsqueeze(0)
    else:
        ids, pos = tokens.unsqueeze(0), (prefix + depth).unsqueeze(0)
    kwargs = hf_attention.tree_kwargs(tree.ancestor_mask.unsqueeze(0), [prefix], add_root_node=add_root)
    with torch.inference_mode():
        tree_logits = model(
            input_ids=ids, position_ids=pos, cache=copy.deepcopy(cache), use_cache=True, **kwargs
        ).logits
    assert len(calls) == model.config.num_hidden_layers  # one op call per layer, none elsewhere
    offset = 1 if add_root else 0
    for i in range(len(parents)):
        seq = torch.cat([prompt[0], tokens[_path(parents, i)]]).unsqueeze(0)
        with torch.inference_mode():
            want = model(input_ids=seq).logits[0, -1]
        torch.testing.assert_close(tree_logits[0, offset + i], want, rtol=1e-4, atol=1e-4)
    assert p == prefix + offset


def test_without_tree_kwargs_is_sdpa(model):
    prompt = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        ours = model(input_ids=prompt).logits
        model.set_attn_implementation("sdpa")
        try:
            sdpa = model(input_ids=prompt).logits
        finally:
            hf_attention.enable(model)
    torch.testing.assert_close(ours, sdpa)


def test_tree_kwargs_validates_once(model):
    two_roots = torch.tensor([[[1], [2]]], dtype=torch.int64)  # nodes 0 and 1 both roots: valid
    hf_attention.tree_kwargs(two_roots, [3])
    worse = torch.tensor([[[1], [6]]], dtype=torch.int64)  # node 1 has a bit j > i
    with pytest.raises(ValueError, match="j > i"):
        hf_attention.tree_kwargs(worse, [3])


def test_add_root_packs_root_as_ancestor():
    mask = DraftTree(torch.zeros(3, dtype=torch.long), torch.tensor([-1, 0, -1], dtype=torch.int32)).ancestor_mask
    padded = torch.zeros(1, 4, 1, dtype=torch.int64)
    padded[0, :3] = mask
    rooted = hf_attention.add_root(padded)
    assert rooted[0, :, 0].tolist() == [0b1, 0b11, 0b111, 0b1001, 0]


def test_unsupported_features_raise(model):
    q = torch.randn(1, 4, 2, 16)
    kv = torch.randn(1, 2, 5, 16)
    kwargs = hf_attention.tree_kwargs(torch.tensor([[[1], [3]]]), [3])
    with pytest.raises(ValueError, match="sliding_window"):
        hf_attention.tree_attention_forward(
            model.model.layers[0].self_attn, q, kv, kv, None, sliding_window=4, **kwargs
        )
    with pytest.raises(ValueError, match="both"):
        hf_attention.tree_attention_forward(
            model.model.layers[0].self_attn, q, kv, kv, None, specdec_tree_mask=kwargs["specdec_tree_mask"]
        )
