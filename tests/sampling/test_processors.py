"""A checkpoint's own generation settings: logits processors honoured exactly (greedy equal to
model.generate, the sampled law exact), sampling defaults taken, everything else refused by name."""

import pytest
import torch
from helpers_proposers import RandomTreeProposer, SampledTreeProposer
from transformers import GenerationConfig
from transformers.generation.logits_process import MinPLogitsWarper, RepetitionPenaltyLogitsProcessor

from specdec import ReplayProposer
from specdec.conformance.laws import exact_law
from specdec.conformance.suite import g_test
from specdec.engine.decoder import SpeculativeDecoder
from specdec.models import tiny_model
from specdec.proposers.suffix import SuffixProposer
from specdec.sampling.params import SamplingParams, process_logits
from specdec.sampling.processors import GenerationSettings, UnsupportedGenerationSetting, effective_config

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5], [8, 9], [10, 11, 12, 13, 14, 15, 16, 10, 11]]
NEW = 20

# Each setting must change model.generate's greedy output on these prompts (checked below), so the
# equality that follows has power.
SETTINGS = [
    {"repetition_penalty": 1.8},
    {"no_repeat_ngram_size": 2},
    {"bad_words_ids": [[20], [21, 22]]},
    {"min_new_tokens": 12},
    {"min_length": 18},
    {"sequence_bias": {(20,): -5.0, (4, 5): 3.0}},
    {"suppress_tokens": [20, 33]},
    {"repetition_penalty": 1.4, "no_repeat_ngram_size": 3, "min_new_tokens": 6},
]


EOS = 6  # greedy answers to PROMPTS reach it early, so min_length / min_new_tokens matter


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def _generate(model, config, prompt):
    out = model.generate(torch.tensor([prompt]), generation_config=config)
    return out[0, len(prompt):].tolist()


def _config(**settings):
    return GenerationConfig(eos_token_id=EOS, pad_token_id=0, do_sample=False, max_new_tokens=NEW, **settings)


def _proposers(model, prompt, script):
    V = model.config.vocab_size
    return [ReplayProposer({0: script}), RandomTreeProposer(V, seed=1), SuffixProposer(V)]


@pytest.mark.parametrize("settings", SETTINGS, ids=[",".join(s) for s in SETTINGS])
def test_greedy_with_the_checkpoint_processors_equals_model_generate(model, settings):
    config = _config(**settings)
    changed, accepted, drafted = 0, {}, {}
    for prompt in PROMPTS:
        want = _generate(model, config, prompt)
        changed += want != _generate(model, _config(), prompt)
        for prop in _proposers(model, prompt, want):
            dec = SpeculativeDecoder(model, prop, budget=6, generation_config=config)
            got = dec.generate(prompt, NEW, req_id=0)
            assert got.tokens == want, (type(prop).__name__, settings)
            name = type(prop).__name__
            accepted[name] = accepted.get(name, 0) + got.metrics.accepted
            drafted[name] = drafted.get(name, 0) + got.metrics.drafted
    assert changed, f"{settings} never changes the output: the test would have no power"
    # Trees were verified and the replay's paths accepted: processed rows were read past accepted drafts.
    # (Lookup drafts only repeats: under a repetition penalty the output has none, and it drafts nothing.)
    assert drafted["RandomTreeProposer"] > 0 and accepted["ReplayProposer"] > 0, (drafted, accepted)


def test_processors_apply_to_ragged_batches_and_the_models_own_config(model):
    config = _config(repetition_penalty=1.6, no_repeat_ngram_size=2)
    want = [_generate(model, config, p) for p in PROMPTS]
    saved = model.generation_config
    model.generation_config = config  # what a checkpoint carries
    try:
        dec = SpeculativeDecoder(model, RandomTreeProposer(model.config.vocab_size, seed=2), budget=5)
        got = dec.generate_batch(PROMPTS, NEW)
    finally:
        model.generation_config = saved
    assert [r.tokens for r in got] == want
    assert sum(r.metrics.accepted for r in got) > 0


def test_sampled_law_with_a_repetition_penalty_is_exact():
    """Tokens 1-3 of the decoder with sampled trees follow the law of sampling the processed target
    token by token, the repetition penalty reading each row's own path. (Its power is against the
    unpenalised law; that the path matters is what the greedy tests catch, see the path-blind one.)"""
    vocab, prompt = 8, [1, 2, 3]
    model = tiny_model("llama", vocab_size=vocab, hidden_size=16, heads=2, kv_heads=1, seed=3)
    params, penalty = SamplingParams(temperature=0.9), RepetitionPenaltyLogitsProcessor(3.0)
    config = GenerationConfig(repetition_penalty=3.0, do_sample=False)

    def target(prefix):
        with torch.no_grad():
            logits = model(torch.tensor([list(prefix)])).logits[0, -1:].double()
            return params.process(penalty(torch.tensor([list(prefix)]), logits)[0])

    law = exact_law(target, prompt, 3, vocab)
    dec = SpeculativeDecoder(model, SampledTreeProposer(vocab, seed=1), max_budget=4, budget=4,
                             generation_config=config)
    res = dec.generate_batch([prompt] * 1500, 3, params, stop_tokens=(), generator=torch.Generator().manual_seed(0))
    counts = torch.zeros(vocab**3)
    for r in res:
        counts[(r.tokens[0] * vocab + r.tokens[1]) * vocab + r.tokens[2]] += 1
    assert sum(r.metrics.accepted for r in res) > 0
    g, dof, p_value, impossible = g_test(counts, law)
    assert impossible == 0 and p_value > 1e-3, f"G={g:.1f} dof={dof} p={p_value:.2g}"
    with torch.no_grad():
        without = exact_law(lambda prefix: params.process(model(torch.tensor([list(prefix)])).logits[0, -1].double()),
                            prompt, 3, vocab)
    assert g_test(counts, without)[2] < 1e-3  # power: the penalty's law is told apart from the plain one


@pytest.mark.parametrize("settings, name", [
    ({"num_beams": 2}, "num_beams"),
    ({"forced_eos_token_id": 1}, "forced_eos_token_id"),
    ({"guidance_scale": 1.5}, "guidance_scale"),
    ({"do_sample": True, "typical_p": 0.9}, "typical_p"),
    ({"num_return_sequences": 2, "do_sample": True}, "num_return_sequences"),
])
def test_settings_that_cannot_be_reproduced_are_refused_by_name(model, settings, name):
    with pytest.raises(UnsupportedGenerationSetting, match=rf"{name}=.*model\.generation_config\.{name} = "):
        SpeculativeDecoder(model, generation_config=GenerationConfig(**settings))


def test_sampling_filters_of_a_greedy_config_are_unused_like_in_generate(model):
    assert GenerationSettings.from_model(model, GenerationConfig(typical_p=0.5)).sampling is None


def test_a_sampling_checkpoint_gives_the_default_sampling_top_k_50_included(model):
    s = GenerationSettings.from_model(model, GenerationConfig(do_sample=True, temperature=0.7, min_p=0.05))
    assert s.sampling == SamplingParams(temperature=0.7, top_k=50, top_p=1.0, min_p=0.05)
    assert effective_config(model, GenerationConfig(do_sample=True)).top_k == 50  # transformers' default
    dec = SpeculativeDecoder(model, generation_config=GenerationConfig(do_sample=True, temperature=0.7))
    assert dec._sampling(None) == SamplingParams(temperature=0.7, top_k=50)
    assert dec._sampling(SamplingParams(temperature=0)) is None  # an explicit greedy call stays greedy


def test_min_p_matches_hugging_face():
    logits = torch.randn(4, 40, generator=torch.Generator().manual_seed(0)) * 3
    ours = process_logits(logits, temperature=0.8, top_k=30, top_p=0.9, min_p=0.1)
    theirs = logits / 0.8
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    for w in (TopKLogitsWarper(30), TopPLogitsWarper(0.9), MinPLogitsWarper(0.1)):
        theirs = w(None, theirs)
    torch.testing.assert_close(ours, torch.softmax(theirs, -1), atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="min_p must be in"):
        SamplingParams(min_p=1.5)


def test_a_processor_blind_to_the_draft_path_is_caught(model, monkeypatch):
    """Power of the greedy equality: processing every row with the committed context only (ignoring
    the draft path to the row's node) must break it."""
    from specdec.sampling import processors

    def path_blind(self, scores, sequence, tree):
        out, rows = scores.clone(), 1 + tree.num_nodes
        processed = scores[:rows].clone()
        for p in self.processors:
            processed = p(torch.tensor([list(sequence)] * rows), processed)
        out[:rows] = processed
        return out

    monkeypatch.setattr(processors.RowProcessors, "apply", path_blind)
    config = _config(repetition_penalty=1.8)
    mismatches = 0
    for prompt in PROMPTS:
        want = _generate(model, config, prompt)
        dec = SpeculativeDecoder(model, ReplayProposer({0: want}), budget=6, generation_config=config)
        mismatches += dec.generate(prompt, NEW, req_id=0).tokens != want
    assert mismatches > 0
