"""What ``generate`` prepared for stopping and streaming, through ``custom_generate``: the streamer sees
exactly ``generate``'s sequence of ``put`` calls; stop strings (callable form with a caller-built
criterion, folder form with ``stop_strings=`` and ``tokenizer=``), the caller's own criteria and
``max_time`` end each row where ``generate`` ends it, even inside a step that accepted several tokens.

The drafter is the oracle tree (several tokens accepted per step), so stops fall inside steps.
"""

import pytest
import torch
from hf_generate_helpers import CHARS, OracleTreeProposer, char_tokenizer, left_pad
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria

from specdec.integrations.hf import FOLDER, generate
from specdec.models import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5, 6], [8, 9], [10, 11, 12, 10, 11]]
NEW = 12
EOS = 63  # set so that generate pads rows that stopped (it pads only when an EOS criterion exists)


class Recorder:
    """A streamer that records every ``put`` (as lists) and ``end``."""

    def __init__(self):
        self.calls = []

    def put(self, value):
        self.calls.append(value.tolist())

    def end(self):
        self.calls.append("end")


class StopAfter(StoppingCriteria):
    """A caller's criterion: stop a row once it has emitted ``token`` as its ``at_least``-th or later token."""

    def __init__(self, token, width, at_least):
        self.token, self.width, self.at_least = token, width, at_least

    def __call__(self, input_ids, scores, **kwargs):
        late = input_ids.shape[1] - self.width >= self.at_least
        return (input_ids[:, -1] == self.token) & late


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("llama")
    refs = [model.generate(torch.tensor([p]), max_new_tokens=NEW, do_sample=False, eos_token_id=None,
                           pad_token_id=0)[0, len(p):].tolist() for p in PROMPTS]
    oracle = OracleTreeProposer(dict(zip(map(tuple, PROMPTS), refs)), model.config.vocab_size)
    return model, refs, oracle


def _pair(model, ids, mask, **kwargs):
    """(plain generate, custom_generate with the same arguments) for greedy decoding."""
    spec = kwargs.pop("spec")
    common = dict(attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, **kwargs)
    with torch.inference_mode():
        return model.generate(ids, **common), model.generate(ids, **common, **spec)


def test_streamer_receives_what_generate_streams(setup):
    model, refs, oracle = setup
    spec = {"custom_generate": generate, "proposer": oracle, "budget": 5, "max_budget": 5}
    for prompts, eos in (([PROMPTS[0]], None), (PROMPTS, refs[0][5])):
        ids, mask = left_pad(prompts)
        plain, ours = Recorder(), Recorder()
        common = dict(attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, eos_token_id=eos)
        with torch.inference_mode():
            want = model.generate(ids, **common, streamer=plain)
            got = model.generate(ids, **common, streamer=ours, **spec)
        assert torch.equal(got, want)
        assert ours.calls == plain.calls  # the prompt, then one [B] per position (pads after a row's stop), end
        assert ours.calls.count("end") == 1 and len(ours.calls) == 2 + want.shape[1] - ids.shape[1]


def test_stop_strings_cut_inside_a_step(setup):
    model, refs, oracle = setup
    tok = char_tokenizer()
    stop = CHARS[refs[0][3]] + CHARS[refs[0][4]]  # completed by the 5th token of row 0
    ids, mask = left_pad(PROMPTS)
    criteria = StoppingCriteriaList([StopStringCriteria(tok, [stop])])
    spec = {"custom_generate": generate, "proposer": oracle, "budget": 8, "max_budget": 8,
            "return_dict_in_generate": True}
    want, got = _pair(model, ids, mask, eos_token_id=EOS, stopping_criteria=criteria, spec=spec)
    assert torch.equal(got.sequences, want)
    assert got.sequences[0, ids.shape[1]:ids.shape[1] + 6].tolist() == refs[0][:5] + [0]  # cut, then padded
    assert got.finish_reasons[0] == "stop" and got.metrics[0].accepted >= 3
    folder = {"custom_generate": FOLDER, "trust_remote_code": True, "proposer": oracle, "budget": 8, "max_budget": 8}
    want, got = _pair(model, ids, mask, eos_token_id=EOS, stop_strings=[stop], tokenizer=tok, spec=folder)
    assert torch.equal(got, want)
    assert got[0, ids.shape[1]:ids.shape[1] + 6].tolist() == refs[0][:5] + [0]


def test_caller_criteria_and_max_time(setup):
    model, refs, oracle = setup
    ids, mask = left_pad(PROMPTS)
    spec = {"custom_generate": generate, "proposer": oracle, "budget": 8, "max_budget": 8}
    criteria = StoppingCriteriaList([StopAfter(refs[2][6], ids.shape[1], 3)])
    want, got = _pair(model, ids, mask, eos_token_id=EOS, stopping_criteria=criteria, spec=spec)
    assert torch.equal(got, want)
    assert (got[:, ids.shape[1]:] == 0).any()  # a row stopped and was padded, as generate pads it
    want, got = _pair(model, ids, mask, eos_token_id=EOS, max_time=0.0, spec=spec)
    assert torch.equal(got, want) and got.shape[1] == ids.shape[1] + 1
