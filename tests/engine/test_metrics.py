"""RequestMetrics means one thing: only emitted tokens count, drafts stop at the tokens left, and the
two rates have one name each (tokens_per_step, accepted_drafts_per_step)."""

import pytest
import torch

from specdec import ReplayProposer
from specdec.engine.decoder import SpeculativeDecoder
from specdec.engine.metrics import RequestMetrics
from specdec.models import tiny_model

PROMPT = [3, 4, 5, 6, 7, 3, 4, 5]


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def reference(model):
    g = model.generate(torch.tensor([PROMPT]), max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)
    return g[0, len(PROMPT):].tolist()


class _Recording(ReplayProposer):
    """The right script, recording the budgets it was asked for."""

    def __init__(self, script):
        super().__init__({0: script})
        self.budgets = []

    def propose(self, req_ids, budget):
        self.budgets.append(budget)
        return super().propose(req_ids, budget)


def test_accepted_drafts_cut_by_the_length_limit_are_not_counted(model, reference):
    prop = _Recording(reference)
    res = SpeculativeDecoder(model, prop, budget=16).generate(PROMPT, 5, stop_tokens=(), req_id=0)
    m = res.metrics
    assert res.tokens == reference[:5]
    # the prefill emits 1 token; one verify step accepts the 3 drafts left room for, plus the bonus
    assert m.steps == 1 and m.accepted == 3 and m.drafted == 3 and m.tokens == 5
    assert m.accepted_drafts_per_step == 3 and m.tokens_per_step == 4
    assert m.accepted <= m.tokens - m.steps  # never more accepted than emitted


def test_accepted_drafts_after_a_stop_token_are_not_counted(model, reference):
    stop = reference[2]
    assert stop not in reference[:2]
    res = SpeculativeDecoder(model, ReplayProposer({0: reference}), budget=16).generate(PROMPT, 24,
                                                                                      stop_tokens=[stop], req_id=0)
    m = res.metrics
    assert res.tokens == reference[:3] and res.finish_reason == "stop"
    assert m.steps == 1 and m.accepted == 2  # 16 drafts verified and matching, 2 emitted before the stop
    assert sum(m.accepted_hist) == m.steps


def test_no_draft_is_asked_for_when_one_token_is_left(model, reference):
    prop = _Recording(reference)
    res = SpeculativeDecoder(model, prop, budget=1).generate(PROMPT, 3, stop_tokens=(), req_id=0)
    assert res.tokens == reference[:3]
    # step 1: 2 tokens left -> 1 draft level; then at most one token is left -> budget 0
    assert prop.budgets[0] == 1 and all(b in (0, [0]) for b in prop.budgets[1:])


def test_the_two_rates_and_no_mixed_name():
    m = RequestMetrics(steps=2, tokens=7, accepted_hist=[0, 1, 1])
    assert m.accepted_drafts_per_step == 1.5 and m.tokens_per_step == 3.0
    assert not hasattr(m, "mean_accepted")  # the 0.2 alias, removed in 0.3
    assert "tokens_per_step=3.00" in m.summary() and "accepted_drafts_per_step=1.50" in m.summary()
