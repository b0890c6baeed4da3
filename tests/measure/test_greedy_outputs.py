"""clean_generate: greedy means the target's argmax even when the checkpoint's generation config
carries logits processors, for every caller (data generation, HF baselines, workload replay)."""

import pytest
import torch

from specdec.measure.speedup import hf_method
from specdec.engine.decoder import SpeculativeDecoder
from specdec.models import clean_generate
from specdec.models import tiny_model
from specdec.measure.proposer_stats import greedy_outputs


@pytest.fixture()
def penalised():
    """A tiny model, its argmax continuation of two prompts, then a penalising generation config."""
    model = tiny_model(seed=3)
    prompts = [[5, 9, 12], [7, 30, 22, 41, 8, 16]]
    argmax = [SpeculativeDecoder(model).generate(p, 10, stop_tokens=[1]).tokens for p in prompts]
    model.generation_config.repetition_penalty = 50.0
    model.generation_config.no_repeat_ngram_size = 1
    return model, prompts, argmax


def test_greedy_is_the_argmax_and_the_config_is_restored(penalised):
    model, prompts, argmax = penalised
    for p, ref in zip(prompts, argmax):
        out = clean_generate(model, torch.tensor([p]), max_new_tokens=10, pad_token_id=0, eos_token_id=1)
        assert out[0, len(p):].tolist() == ref
    assert model.generation_config.repetition_penalty == 50.0


def test_baselines_and_replays_use_it(penalised):
    model, prompts, argmax = penalised
    for kwargs in ({}, {"prompt_lookup_num_tokens": 3}):
        fn = hf_method("hf", model, [1], **kwargs).fn
        assert [fn(p, 10)[0] for p in prompts] == argmax
    assert list(greedy_outputs(model, dict(enumerate(prompts)), 10, eos_token_id=1).values()) == argmax


def test_config_restored_when_generate_fails():
    model = tiny_model()
    saved = model.generation_config
    with pytest.raises(Exception):
        clean_generate(model, torch.tensor([[1, 2]]), max_new_tokens=2, pad_token_id=0, eos_token_id=1,
                       not_a_generate_option=True)
    assert model.generation_config is saved
