"""Every supported architecture verifies trees exactly: tiny random configs of each, with sliding
windows that bind, learned positions, soft-capping and scaled logits, in both attention modes.

Per case: (1) every tree node's logits equal an uncached forward over its path, on a ragged batch
with holes in the cache; (2) greedy output equals ``model.generate`` for single requests and ragged
batches, with random trees of many shapes and with fully accepted chains (compaction of long paths).
"""

import pytest
import torch
from architecture_cases import CASES as BASE_CASES, WINDOW
from helpers_proposers import RandomTreeProposer

from specdec import DraftTree, ReplayProposer
from specdec.engine.decoder import SpeculativeDecoder
from specdec.models import clean_generate, tiny_model
from specdec.verify.hf import HFTarget

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5, 6], [8, 9], [10, 11, 12, 10, 11]]
NEW = 10
ATOL = 1e-4
pytestmark = pytest.mark.usefixtures("one_thread")

CASES = dict(BASE_CASES)
CASES.update({
    "granite-scaled": ("granite", {"logits_scaling": 4.0, "embedding_multiplier": 2.0, "residual_multiplier": 0.5,
                                   "attention_multiplier": 0.3}),
    "gemma3-softcap": ("gemma3_text", {"final_logit_softcapping": 5.0, "sliding_window": WINDOW}),
})
#: What attention="tree_op" refuses, by feature (the mask path runs these).
TREE_OP_REFUSED = {"gemma2": "soft-caps attention logits", "gemma2-window": "soft-caps attention logits",
                   "stablelm": "_supports_attention_backend", "falcon": "_supports_attention_backend"}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    model_type, overrides = CASES[request.param]
    model = tiny_model(model_type, **overrides)
    refs = [clean_generate(model, torch.tensor([p]), max_new_tokens=NEW, pad_token_id=0, eos_token_id=None)
            [0, len(p):].tolist() for p in PROMPTS]
    return request.param, model, refs


def modes(name):
    return ["mask"] if name in TREE_OP_REFUSED else ["mask", "tree_op"]


def full_logits(model, seq):
    with torch.no_grad():
        return model(torch.tensor([seq])).logits[0].float()


def test_tree_logits_match_uncached_forward(case):
    """A ragged batch (holes in the cache), then a tree step: every node's logits are the model's own
    on its path, for every layer's window and every logit transform."""
    name, model, _ = case
    for mode in modes(name):
        target = HFTarget(model, attention=mode)
        state, _, _ = target.prefill(PROMPTS)
        target.set_pending(state, [13, 14, 15])
        first = [DraftTree.chain(torch.tensor([16, 17, 18])), DraftTree.empty(),
                 DraftTree(torch.tensor([19, 20, 21]), torch.tensor([-1, -1, 1]))]
        target.verify(state, first)
        target.commit(state, [[0, 1, 2], [], [1, 2]], [22, 23, 24])
        committed = [PROMPTS[0] + [13, 16, 17, 18], PROMPTS[1] + [14], PROMPTS[2] + [15, 20, 21]]
        trees = [DraftTree(torch.tensor([25, 26, 27, 28, 29]), torch.tensor([-1, 0, 0, 2, -1])),
                 DraftTree.chain(torch.tensor([30, 31, 32, 33])), DraftTree.empty()]
        out = target.verify(state, trees)
        for b, tree in enumerate(trees):
            base = committed[b] + [state.pending[b]]
            torch.testing.assert_close(out.logits[b, 0], full_logits(model, base)[-1], atol=ATOL, rtol=0)
            for i in range(tree.num_nodes):
                seq = base + [int(tree.tokens[j]) for j in tree.path_to(i)]
                torch.testing.assert_close(out.logits[b, 1 + i], full_logits(model, seq)[-1], atol=ATOL, rtol=0,
                                           msg=lambda m: f"{name} {mode} request {b} node {i}: {m}")


def test_greedy_equals_generate(case):
    """Random trees (empty, chains, branches, several roots), single requests and a ragged batch;
    then a replay of the right answer (long accepted chains), in each attention mode."""
    name, model, refs = case
    for mode in modes(name):
        target = HFTarget(model, attention=mode)
        dec = SpeculativeDecoder(target, RandomTreeProposer(64, seed=1), max_budget=6, budget=6)
        singles = [dec.generate(p, NEW, stop_tokens=()) for p in PROMPTS]
        assert [r.tokens for r in singles] == refs, (name, mode)
        batch = dec.generate_batch(PROMPTS, NEW, stop_tokens=())
        assert [r.tokens for r in batch] == refs, (name, mode)
        # Random tokens are rarely accepted: these show the trees were verified, the replay below accepted paths.
        assert all(r.metrics.drafted > 0 for r in singles + batch), (name, mode)
        replay = SpeculativeDecoder(target, ReplayProposer(dict(enumerate(refs))), max_budget=4, budget=4)
        results = replay.generate_batch(PROMPTS, NEW, stop_tokens=(), req_ids=[0, 1, 2])
        assert [r.tokens for r in results] == refs, (name, mode)
        assert all(r.metrics.accepted > 0 for r in results)


@pytest.mark.parametrize("name", sorted(TREE_OP_REFUSED))
def test_tree_op_refuses_by_feature(name):
    model_type, overrides = CASES[name]
    with pytest.raises(ValueError, match=TREE_OP_REFUSED[name]):
        HFTarget(tiny_model(model_type, **overrides), attention="tree_op")


def test_sliding_layers_keep_every_row():
    """transformers' sliding cache layers drop rows; the adapter's cache keeps them all (the window
    lives in the mask), so compaction moves the same rows on every layer."""
    target = HFTarget(tiny_model("gemma3_text", sliding_window=WINDOW))
    state, _, _ = target.prefill(PROMPTS)
    assert [layer.keys.shape[-2] for layer in state.cache.layers] == [max(map(len, PROMPTS))] * 2


def _refused(match, model):
    with pytest.raises(ValueError, match=match):
        HFTarget(model)


def test_models_without_the_features_are_refused():
    model = tiny_model("llama")
    model.config._attn_implementation = "flash_attention_2"
    _refused("does not take a prepared 4-D tree mask", model)
    _refused("ALiBi", tiny_model("falcon", alibi=True))
    _refused("bidirectional attention", tiny_model("gemma3_text", use_bidirectional_attention=True))
    gemma2 = tiny_model("gemma2")
    gemma2.config._attn_implementation = "sdpa"
    _refused("attn_implementation='eager'", gemma2)
    qwen = tiny_model("qwen3")
    qwen.config.layer_types = ["full_attention", "linear_attention"]
    _refused(r"layers of type \['linear_attention'\]", qwen)
    llama = tiny_model("llama")
    llama.config.logits_scaling = 4.0  # the adapter would divide; the model's own head does not
    _refused("other logits than its LM head", llama)
    _refused("causal LM", torch.nn.Linear(2, 2))
