"""Greedy output through ``custom_generate`` equals plain ``model.generate``, for every architecture of
the tiny-model matrix (``specdec.models.TINY_MODEL_TYPES`` plus the sliding-window variants of
``tests/architecture_cases.py``), one request at a time and as a left-padded batch.

The drafter is an oracle tree whose right answer is never the leading chain (root child 0 is wrong,
root child 1 starts the reference), so nearly every step accepts a non-leading path and moves KV rows:
the entry's prompts, positions and padding must all be right for the outputs to agree. A second
batch stops rows at an EOS id (ragged lengths, pad-filled), a third uses the ``suffix`` spec string.
"""

import pytest
import torch
from architecture_cases import CASES
from hf_generate_helpers import OracleTreeProposer, left_pad

from specdec.integrations.hf import generate
from specdec.models import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5, 6], [8, 9], [10, 11, 12, 10, 11]]
NEW = 10


def _generate(model, ids, mask=None, **kwargs):
    with torch.inference_mode():
        return model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, **kwargs)


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    model_type, overrides = CASES[request.param]
    model = tiny_model(model_type, **overrides)
    refs = [_generate(model, torch.tensor([p]), eos_token_id=None)[0, len(p):].tolist() for p in PROMPTS]
    return request.param, model, refs


def test_greedy_equals_generate_single_and_left_padded_batch(case):
    name, model, refs = case
    vocab = model.config.vocab_size
    oracle = OracleTreeProposer(dict(zip(map(tuple, PROMPTS), refs)), vocab)
    for p, ref in zip(PROMPTS, refs):
        out = _generate(model, torch.tensor([p]), eos_token_id=None, custom_generate=generate, proposer=oracle,
                        budget=5, max_budget=5)
        assert out[0, len(p):].tolist() == ref, (name, p)
    ids, mask = left_pad(PROMPTS)
    want = _generate(model, ids, mask, eos_token_id=None)
    out = _generate(model, ids, mask, eos_token_id=None, custom_generate=generate, proposer=oracle, budget=5,
                    max_budget=5, return_dict_in_generate=True)
    assert torch.equal(out.sequences, want), name
    assert sum(m.accepted for m in out.metrics) >= len(PROMPTS) * NEW // 2, (name, out.metrics)
    eos = refs[0][4]  # stops the first row early; the others as their greedy paths meet it
    want = _generate(model, ids, mask, eos_token_id=eos)
    got = _generate(model, ids, mask, eos_token_id=eos, custom_generate=generate, proposer="suffix", budget=4,
                    max_budget=4, return_dict_in_generate=True)
    assert torch.equal(got.sequences, want), name
    assert sum(m.drafted for m in got.metrics) > 0, name  # lookup's trees were verified around the stops
