"""What carries over from ``generate`` through ``custom_generate``: every logits processor ``generate``
builds (per tree node, on the padded row ``generate`` would process), ``prefix_allowed_tokens_fn`` with
each row's batch index, a caller's own processor, the sampling warpers mapped onto specdec's sampler,
Hugging Face's ``assistant_model=`` and ``prompt_lookup_num_tokens=``, ``num_return_sequences``, a reused
decoder; and ``SpeculativeDecoder``'s own stop-token convention (an int, like ``eos_token_id``).
"""

import pytest
import torch
from hf_generate_helpers import OracleTreeProposer, char_tokenizer, left_pad
from transformers import LogitsProcessor, LogitsProcessorList, WatermarkingConfig
from transformers.generation import logits_process as lp

from specdec import SpeculativeDecoder
from specdec.conformance.targets import noisy_copy
from specdec.integrations.hf import FOLDER, generate
from specdec.integrations.hf.logits import split_processors
from specdec.models import tiny_model
from specdec.proposers.suffix import SuffixProposer
from specdec.sampling.params import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5, 6], [8, 9], [10, 11, 12, 10, 11]]
NEW = 12


class RowSumPenalty(LogitsProcessor):
    """A caller's processor that depends only on each row: lowers the token ``sum(row) % V``."""

    def __call__(self, input_ids, scores):
        out = scores.clone()
        out[torch.arange(len(input_ids)), input_ids.sum(1) % scores.shape[1]] -= 3.0
        return out


@pytest.fixture(scope="module")
def setup():
    model = tiny_model("llama")
    refs = [model.generate(torch.tensor([p]), max_new_tokens=NEW, do_sample=False, eos_token_id=None,
                           pad_token_id=0)[0, len(p):].tolist() for p in PROMPTS]
    return model, refs


def _both(model, ids, mask, spec, **kwargs):
    common = dict(attention_mask=mask, max_new_tokens=NEW, pad_token_id=0, **kwargs)
    with torch.inference_mode():
        return model.generate(ids, **common), model.generate(ids, **common, **spec)


PROCESSOR_SETS = {
    "penalties": dict(repetition_penalty=1.5, no_repeat_ngram_size=2, sequence_bias={(20,): -4.0, (49, 20): -9.0}),
    "lengths": dict(eos_token_id=[40, 41], min_new_tokens=4, min_length=14, exponential_decay_length_penalty=(5, 1.6)),
    "words": dict(bad_words_ids=[[18], [12, 49]], suppress_tokens=[20, 55], begin_suppress_tokens=[40, 12],
                  forced_eos_token_id=2, renormalize_logits=True, remove_invalid_values=True),
    "constraints": dict(prefix_allowed_tokens_fn=lambda b, row: list(range(b, 64, 2 + b)),
                        logits_processor=LogitsProcessorList([RowSumPenalty()])),
    "watermark": dict(watermarking_config=WatermarkingConfig(bias=3.0, context_width=2)),
}


@pytest.mark.parametrize("name", list(PROCESSOR_SETS))
def test_processors_generate_prepared_hold_per_node(setup, name):
    """Greedy, left-padded batch: the processors see the padded rows (repetition penalty skips the
    padding per row, length processors count it) and each tree node's own path."""
    model, refs = setup
    ids, mask = left_pad(PROMPTS)
    oracle = OracleTreeProposer(dict(zip(map(tuple, PROMPTS), refs)), 64)
    kwargs = {"eos_token_id": None, **PROCESSOR_SETS[name]}
    for proposer in (oracle, "suffix"):
        want, got = _both(model, ids, mask, {"custom_generate": generate, "proposer": proposer, "budget": 6,
                                            "max_budget": 6}, do_sample=False, **kwargs)
        assert torch.equal(got, want), (name, proposer, got.tolist(), want.tolist())


def test_sampling_warpers_map_to_the_sampler_and_the_rest_runs_per_node():
    temp, top_k, top_p, min_p = (lp.TemperatureLogitsWarper(0.7), lp.TopKLogitsWarper(5), lp.TopPLogitsWarper(0.9),
                                 lp.MinPLogitsWarper(0.05))
    rep = lp.RepetitionPenaltyLogitsProcessor(1.2)
    assert split_processors([rep, temp, top_k, top_p, min_p], True) == ([rep], SamplingParams(0.7, 5, 0.9, 0.05))
    assert split_processors([top_k, temp], True) == ([top_k], SamplingParams(0.7))  # out of order: top-k per node
    keep2 = lp.TopKLogitsWarper(5, min_tokens_to_keep=2)
    assert split_processors([temp, keep2], True) == ([temp, keep2], SamplingParams(1.0))
    mark = lp.WatermarkLogitsProcessor(64, "cpu")
    assert split_processors([temp, mark], True) == ([temp, mark], SamplingParams(1.0))  # watermark after the warpers
    assert split_processors([rep, temp], False) == ([rep, temp], SamplingParams(0.0))
    logits = torch.randn(200, 64) * 3
    for warpers in ([temp, top_k, top_p, min_p], [lp.TopPLogitsWarper(0.5), lp.MinPLogitsWarper(0.2)]):
        hf = logits
        for w in warpers:
            hf = w(None, hf)
        _, params = split_processors(warpers, True)
        torch.testing.assert_close(params.process(logits), torch.softmax(hf, -1), atol=1e-6, rtol=0)


def test_assistant_model_and_prompt_lookup_map_to_specdec_proposers(setup):
    model, refs = setup
    ids, mask = left_pad(PROMPTS)
    tok = char_tokenizer()
    draft = noisy_copy(model, std=0.05, seed=1)
    with torch.inference_mode():
        want = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                              eos_token_id=None)
    common = dict(attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0, eos_token_id=None,
                  return_dict_in_generate=True)
    for form in ({"custom_generate": generate, "target_tokenizer": tok},
                 {"custom_generate": FOLDER, "trust_remote_code": True, "tokenizer": tok}):
        with torch.inference_mode():
            out = model.generate(ids, assistant_model=draft, budget=4, max_budget=4, **common, **form)
        assert torch.equal(out.sequences, want)
        assert sum(m.accepted for m in out.metrics) > 0  # the assistant drafted and was accepted
    with torch.inference_mode():
        out = model.generate(ids, prompt_lookup_num_tokens=3, custom_generate=generate, budget=3, **common)
    assert torch.equal(out.sequences, want)
    assert max(len(m.accepted_hist) for m in out.metrics) <= 4  # at most 3 drafted tokens a step


def test_num_return_sequences_and_a_reused_decoder(setup):
    model, refs = setup
    ids, mask = left_pad(PROMPTS)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=True, num_return_sequences=3,
                             pad_token_id=0, eos_token_id=None, custom_generate=generate, budget=4,
                             generator=torch.Generator().manual_seed(0))
    assert out.shape == (9, ids.shape[1] + 5) and torch.equal(out[3:6, :ids.shape[1]], ids[1:2].expand(3, -1))
    decoder = SpeculativeDecoder(model, SuffixProposer(64), budget=4, max_budget=4)
    want, got = _both(model, ids, mask, {"custom_generate": generate, "decoder": decoder}, do_sample=False,
                      eos_token_id=None)
    assert torch.equal(got, want)
    assert torch.equal(_both(model, ids, mask, {"custom_generate": generate, "decoder": decoder}, do_sample=False,
                             eos_token_id=None)[1], want)


def test_decoder_takes_one_stop_token_like_eos_token_id(setup):
    model, refs = setup
    dec = SpeculativeDecoder(model)
    stop = refs[0][4]
    for given in (stop, [stop], torch.tensor(stop), torch.tensor([stop])):
        res = dec.generate(PROMPTS[0], NEW, stop_tokens=given)
        assert res.tokens == refs[0][:refs[0].index(stop) + 1] and res.finish_reason == "stop", given
    for bad, error in ((2.0, TypeError), (True, TypeError), ("5", TypeError), ([-1], ValueError), ([1.5], TypeError)):
        with pytest.raises(error, match="stop_tokens"):
            dec.generate(PROMPTS[0], NEW, stop_tokens=bad)


def test_a_checkpoint_holding_the_folder_generates_with_specdec(setup, tmp_path):
    """``custom_generate/`` copied into a checkpoint folder: loaded with ``trust_remote_code=True``, the
    model's own ``generate`` is specdec's (metrics in the output prove it ran), and equal to plain."""
    import shutil
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    model, refs = setup
    model.save_pretrained(tmp_path)
    shutil.copytree(Path(FOLDER) / "custom_generate", tmp_path / "custom_generate",
                    ignore=shutil.ignore_patterns("__pycache__"))
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True).eval()
    ids, mask = left_pad(PROMPTS)
    with torch.inference_mode():
        out = loaded.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                              eos_token_id=None, return_dict_in_generate=True, budget=4)
        want = model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                              eos_token_id=None)
    assert torch.equal(out.sequences, want) and all(m.steps > 0 for m in out.metrics)
