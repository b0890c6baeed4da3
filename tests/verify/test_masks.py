"""Positions and lengths: nothing ever reaches past a model's last position.

A prompt longer than ``max_position_embeddings``, or a prompt plus ``max_new_tokens`` that needs
more positions, is refused before any model work (GPT-2 and OPT would index past their learned
position tables, rotary models would run untrained positions silently); a draft that would reach
past the last position is cut to the positions left, so a request that fits exactly still decodes
exactly.
"""

import pytest
import torch
from helpers_proposers import RandomTreeProposer

from specdec import DraftTree, ReplayProposer
from specdec.engine.decoder import SpeculativeDecoder
from specdec.models import clean_generate, tiny_model
from specdec.verify.hf import HFTarget

LIMIT = 24
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=["gpt2", "opt", "llama"])  # learned table, learned + offset 2, rotary
def model(request):
    return tiny_model(request.param, max_position_embeddings=LIMIT)


def reference(model, prompt, new):
    return clean_generate(model, torch.tensor([prompt]), max_new_tokens=new, pad_token_id=0,
                          eos_token_id=None)[0, len(prompt):].tolist()


def test_too_long_prompts_are_refused_up_front(model):
    dec = SpeculativeDecoder(model)
    with pytest.raises(ValueError, match=f"prompt 0 has {LIMIT + 1} tokens; with max_new_tokens=1 it needs "
                                         f"{LIMIT + 1} positions, but .* has {LIMIT}"):
        dec.generate(list(range(2, LIMIT + 3)), 1)
    with pytest.raises(ValueError, match=f"prompt 0 has {LIMIT + 1} tokens, more than the {LIMIT} positions"):
        dec.target.prefill([list(range(2, LIMIT + 3))])
    with pytest.raises(ValueError, match=r"prompt 1 has 10 tokens; with max_new_tokens=16 it needs 25 positions.*"
                                         r"use max_new_tokens <= 15"):
        dec.generate_batch([[2, 3], list(range(2, 12))], 16)


def test_a_request_that_fits_exactly_decodes_exactly(model):
    """Prompt + max_new_tokens - 1 == the limit: the last steps' drafts are cut at the last position."""
    prompt = list(range(2, 12))
    new = LIMIT + 1 - len(prompt)
    ref = reference(model, prompt, new)
    dec = SpeculativeDecoder(model, ReplayProposer({0: ref + [5] * 8}), max_budget=8, budget=8)
    res = dec.generate(prompt, new, stop_tokens=(), req_id=0)
    assert res.tokens == ref and res.finish_reason == "length"
    assert res.metrics.accepted > 0
    prompts = [prompt, [7, 8, 9], list(range(30, 30 + LIMIT))]  # the last one: one token, no verify step
    refs = [reference(model, p, LIMIT + 1 - len(prompt)) for p in prompts[:2]] + [reference(model, prompts[2], 1)]
    dec = SpeculativeDecoder(model, RandomTreeProposer(64, seed=3), max_budget=8, budget=8)
    results = dec.generate_batch(prompts[:2], new, stop_tokens=())
    assert [r.tokens for r in results] == refs[:2]
    assert all(r.metrics.drafted > 0 for r in results)  # random trees (rarely accepted) were verified
    assert dec.generate(prompts[2], 1, stop_tokens=()).tokens == refs[2]


def test_verify_refuses_a_tree_past_the_last_position_and_fit_cuts_it(model):
    target = HFTarget(model)
    state, _, _ = target.prefill([list(range(2, LIMIT)), [3, 4]])  # 22 and 2 rows
    target.set_pending(state, [5, 6])
    assert target.positions_left(state) == [1, LIMIT - 3]
    deep = DraftTree(torch.tensor([7, 8, 9, 10]), torch.tensor([-1, 0, -1, 1]))  # depths 1, 2, 1, 3
    with pytest.raises(ValueError, match=f"request 0's tree reaches position {LIMIT + 1}, past the last position "
                                         f"\\({LIMIT - 1}\\)"):
        target.verify(state, [deep, DraftTree.empty()])
    assert state.verified is None and state.cache_len == LIMIT - 2  # the refused step left nothing behind
    trees = target.fit_positions(state, [deep, deep])
    assert trees[0].tokens.tolist() == [7, 9] and trees[0].parents.tolist() == [-1, -1] and trees[1] is deep
    out = target.verify(state, trees)  # request 0's padded rows stay at its pending position
    with torch.no_grad():
        full = model(torch.tensor([list(range(2, LIMIT)) + [5, 9]])).logits[0, -1]
    torch.testing.assert_close(out.logits[0, 2], full, atol=1e-4, rtol=0)


def test_cut_keeps_parents_and_draft_rows():
    probs = torch.softmax(torch.randn(5, 16), -1)
    tree = DraftTree(torch.tensor([1, 2, 3, 4, 5]), torch.tensor([-1, 0, 1, -1, 3]), probs)
    cut, kept = tree.cut(1)
    assert cut.tokens.tolist() == [1, 4] and cut.parents.tolist() == [-1, -1]
    torch.testing.assert_close(cut.draft_probs, probs[[0, 3]])
    assert kept == [0, 3] and tree.cut(3)[0] is tree and tree.cut(3)[1] is None
    assert tree.cut(0)[0].num_nodes == 0 and tree.cut(0)[1] == []
