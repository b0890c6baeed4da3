"""Fingerprints, manifests and compatibility checks (specdec.artifacts)."""

import json
import os

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec.artifacts import (
    IncompatibleArtifactError,
    Manifest,
    TokenizerInfo,
    check_compatible,
    check_tokenizers_identical,
    load_artifact,
    read_manifest,
    record_measurement,
    save_artifact,
    target_fingerprint,
    tensors_fingerprint,
    tokenizer_fingerprint,
    tokenizer_mismatch,
)


def tiny_llama(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64, **kw)
    return LlamaForCausalLM(cfg).eval()


def test_target_fingerprint_stable_and_sensitive():
    a = tiny_llama(0)
    fp = target_fingerprint(a)
    assert fp.startswith("target-") and fp == target_fingerprint(a)
    assert fp == target_fingerprint(tiny_llama(0)), "same weights + config must give the same fingerprint"
    assert fp != target_fingerprint(tiny_llama(1)), "a retrain (different weights) must change it"
    b = tiny_llama(0)
    with torch.no_grad():
        b.model.layers[1].mlp.down_proj.weight[3, 5] += 1e-3  # one element, likely outside the sample
    assert fp != target_fingerprint(b), "a single-element edit must change it"
    c = tiny_llama(0, rms_norm_eps=1e-3)
    assert fp != target_fingerprint(c), "a config change must change it"
    assert fp != target_fingerprint(tiny_llama(0).to(torch.bfloat16)), "a dtype change must change it"


def test_tensors_fingerprint_order_independent_and_shape_sensitive():
    x = torch.arange(12.0)
    assert tensors_fingerprint([("a", x), ("b", x + 1)]) == tensors_fingerprint([("b", x + 1), ("a", x)])
    assert tensors_fingerprint([("a", x)]) != tensors_fingerprint([("a", x.reshape(3, 4))])
    assert tensors_fingerprint([("a", x)]) != tensors_fingerprint([("b", x)])


def _tok(extra=None, special=None):
    vocab = {f"t{i}": i for i in range(10)}
    vocab.update(extra or {})
    return TokenizerInfo(vocab=vocab, special=special or {"eos_token": "t0"})


def test_tokenizer_fingerprint_and_mismatch_listing():
    assert tokenizer_fingerprint(_tok()) == tokenizer_fingerprint(_tok())
    assert tokenizer_fingerprint(_tok()).startswith("tok-")
    assert tokenizer_mismatch(_tok(), _tok()) == []
    check_tokenizers_identical(_tok(), _tok())
    bigger = _tok(extra={"new": 10})
    diffs = tokenizer_mismatch(_tok(), bigger)
    assert any("size 10 != 11" in d for d in diffs) and any("10: None vs 'new'" in d for d in diffs)
    swapped = TokenizerInfo(vocab={**_tok().vocab, "t1": 2, "t2": 1}, special={"eos_token": "t0"})
    diffs = tokenizer_mismatch(_tok(), swapped)
    assert any("2 ids map to different tokens" in d for d in diffs)
    assert tokenizer_fingerprint(_tok()) != tokenizer_fingerprint(swapped)
    other_eos = _tok(special={"eos_token": "t9"})
    with pytest.raises(IncompatibleArtifactError, match="special token eos_token: 't0' vs 't9'"):
        check_tokenizers_identical(_tok(), other_eos)
    with pytest.raises(TypeError, match="get_vocab"):
        tokenizer_fingerprint(object())


def test_hf_tokenizer_is_accepted():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "a": 1, "b": 2}
    hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
                                 unk_token="<unk>")
    assert tokenizer_fingerprint(hf) == tokenizer_fingerprint(TokenizerInfo(vocab, hf.special_tokens_map))


def _manifest(fp="target-abc", bound="target"):
    return Manifest(kind="medusa", name="m", bound_to=bound, fingerprint=fp, config={"k": 2})


def test_save_load_roundtrip_and_tamper_detection(tmp_path):
    tensors = {"w": torch.randn(4, 3), "b": torch.zeros(3)}
    m = save_artifact(str(tmp_path), tensors, _manifest())
    assert m.weights_fingerprint.startswith("weights-")
    loaded, m2 = load_artifact(str(tmp_path))
    assert torch.equal(loaded["w"], tensors["w"]) and m2 == m
    assert m2.to_artifact().bound_to == "target" and m2.to_artifact().version == m.weights_fingerprint
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["weights_fingerprint"] = "weights-000"
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(IncompatibleArtifactError, match="weights-000"):
        load_artifact(str(tmp_path))


def test_check_compatible_refuses_names_both_and_override_warns():
    m = _manifest("target-aaa")
    assert check_compatible(m, "target-aaa") is True
    with pytest.raises(IncompatibleArtifactError, match="target-aaa.*target-bbb"):
        check_compatible(m, "target-bbb")
    with pytest.warns(RuntimeWarning, match="allow_mismatch"):
        assert check_compatible(m, "target-bbb", allow_mismatch=True) is False
    with pytest.raises(ValueError, match="expected a target-"):
        check_compatible(m, "tok-aaa")
    t = _manifest("tok-aaa", bound="tokenizer")
    with pytest.raises(IncompatibleArtifactError, match="tok-aaa.*tok-bbb"):
        check_compatible(t, "tok-bbb")


def test_manifest_validation_and_measurements(tmp_path):
    with pytest.raises(ValueError, match="bound_to"):
        Manifest(kind="medusa", name="x", bound_to="nothing", fingerprint="f")
    with pytest.raises(ValueError, match="no fingerprint"):
        Manifest(kind="medusa", name="x", bound_to="target", fingerprint="")
    with pytest.raises(FileNotFoundError, match="not a specdec artifact"):
        read_manifest(str(tmp_path))
    save_artifact(str(tmp_path), {"w": torch.ones(2)}, _manifest())
    with pytest.raises(ValueError, match="at least one fact"):
        record_measurement(str(tmp_path))
    record_measurement(str(tmp_path), mean_accepted=2.5, command="x")
    m = read_manifest(str(tmp_path))
    assert m.last_measured()["mean_accepted"] == 2.5 and "date" in m.last_measured()
    bad = json.loads((tmp_path / "manifest.json").read_text())
    bad["surprise"] = 1
    (tmp_path / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="unknown keys"):
        read_manifest(str(tmp_path))
    assert os.path.isfile(tmp_path / "weights.safetensors")


def test_refit_command_names_the_training_command_of_each_kind():
    from specdec.artifacts import refit_command

    assert refit_command("medusa") == "specdec train heads"
    assert refit_command("eagle") == "specdec train eagle"
    assert refit_command("draft_model") == "specdec train draft"


def test_train_commands_refuse_a_heldout_every_below_2():
    from types import SimpleNamespace

    from specdec.cli.train import _start

    with pytest.raises(SystemExit, match="--heldout-every must be >= 2"):
        _start(SimpleNamespace(heldout_every=0))
