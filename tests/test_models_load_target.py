"""specdec.models.load_target, the one loader every command uses, and save_dequantized."""

import argparse

import pytest
import torch

from specdec import models
from specdec.cli import common


def _tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(64)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")), unk_token="t0")


def test_a_saved_folder_loads_back_with_the_same_logits(tmp_path):
    model = models.tiny_model("llama")
    model.config.quantization_config = {"quant_method": "gguf"}  # as a GGUF-loaded model carries it
    folder = models.save_dequantized(model, _tokenizer(), tmp_path / "tiny")
    assert hasattr(model.config, "quantization_config")  # the caller's model is not changed
    loaded, tok, name = models.load_target(str(folder))
    assert name == "tiny" and tok.convert_tokens_to_ids("t5") == 5 and not loaded.training
    assert not hasattr(loaded.config, "quantization_config")
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


def test_a_tied_embedding_is_saved_once_under_the_input_embedding_name(tmp_path):
    """vLLM skips lm_head.weight when tie_word_embeddings is set: the shared tensor must be stored
    as model.embed_tokens.weight, or vLLM serves zeros."""
    from safetensors import safe_open

    model = models.tiny_model("llama", tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    folder = models.save_dequantized(model, _tokenizer(), tmp_path / "tied")
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" not in keys
    assert len(keys) == len({id(p) for p in model.parameters()})  # every other tensor once
    loaded, _, _ = models.load_target(str(folder))
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


def test_specs_that_name_nothing_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        models.load_target(str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError, match="neither 'default', a .gguf file, a model folder nor a model id"):
        models.load_target(str(tmp_path / "nothing-here"))


def test_model_flag_takes_a_gguf_file(tmp_path, monkeypatch):
    """--model (generate, bench) goes through the same loader as check/train --target: a .gguf works."""
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    seen = []
    monkeypatch.setattr(models, "load_gguf", lambda path, **kw: seen.append(path) or ("model", "tok"))
    assert common.load_target(argparse.Namespace(model=str(gguf), threads=None)) == ("model", "tok")
    assert seen == [gguf]
