"""`specdec check`: compatibility report and exit status for artifacts, drafters and lookup proposers."""

import json

import pytest
import torch
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from specdec.artifacts import Manifest, record_measurement, save_artifact, target_fingerprint
from specdec.cli import main
from specdec.models import tiny_model


def _save_model(path, seed, vocab_shift=0):
    model = tiny_model(seed=seed)
    vocab = {f"w{i + vocab_shift}": i for i in range(model.config.vocab_size)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="w0")), unk_token="w0")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return model


def test_check_reports_compatibility_and_last_measurement(tmp_path, capsys):
    a = _save_model(tmp_path / "a", 0)
    _save_model(tmp_path / "b", 1)
    art = tmp_path / "heads"
    m = Manifest(kind="medusa", name="m", bound_to="target", fingerprint=target_fingerprint(a), config={})
    save_artifact(str(art), {"w": torch.zeros(2)}, m)
    record_measurement(str(art), mean_accepted=2.5, command="bench")
    assert main(["check", "--target", str(tmp_path / "a"), "--proposer", str(art), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compatible"] and report["last_measured"]["mean_accepted"] == 2.5
    assert main(["check", "--target", str(tmp_path / "b"), "--proposer", str(art)]) == 1
    out = capsys.readouterr().out
    assert "INCOMPATIBLE" in out and m.fingerprint in out and "specdec train heads" in out
    assert main(["check", "--target", str(tmp_path / "b"), "--proposer", str(art), "--allow-mismatch"]) == 0
    assert main(["check", "--target", str(tmp_path / "b"), "--proposer", "suffix"]) == 0
    # the proposer specs every other command takes
    assert main(["check", "--model", str(tmp_path / "a"), "--proposer", f"medusa:{art}"]) == 0
    assert main(["check", "--proposer", "none"]) == 0
    capsys.readouterr()
    assert main(["check", "--model", str(tmp_path / "a"), "--proposer", f"eagle:{art}"]) == 2
    assert "names a 'medusa' artifact" in capsys.readouterr().err
    past = tmp_path / "past.jsonl"
    past.write_text(json.dumps({"response_ids": [1, 2, 3]}) + "\n")
    assert main(["check", "--target", str(tmp_path / "b"), "--proposer", f"suffix:{past}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["warm_tokens"] == 3 and "only cost acceptance, never exactness" in report["note"]
    past.write_text(json.dumps({"response_ids": [1, 64]}) + "\n")
    assert main(["check", "--target", str(tmp_path / "b"), "--proposer", f"suffix:{past}"]) == 1
    assert "holds token id 64, outside the target's vocabulary of 64" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:  # refused while parsing, before the target loads
        main(["check", "--target", str(tmp_path / "b"), "--proposer", f"suffix:{tmp_path / 'missing.jsonl'}"])
    assert refused.value.code == 2 and "no such responses file" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert main(["check", "--target", str(tmp_path / "b"), "--proposer", f"suffix:{tmp_path / 'bad.jsonl'}"]) == 2
    assert "bad.jsonl:1: not valid JSON" in capsys.readouterr().err


def test_check_draft_model_directory_lists_tokenizer_mismatch(tmp_path, capsys):
    _save_model(tmp_path / "t", 0)
    _save_model(tmp_path / "same", 1)
    _save_model(tmp_path / "shifted", 2, vocab_shift=1)
    assert main(["check", "--target", str(tmp_path / "t"), "--proposer", str(tmp_path / "same")]) == 0
    capsys.readouterr()
    assert main(["check", "--target", str(tmp_path / "t"), "--proposer", str(tmp_path / "shifted")]) == 1
    assert "ids map to different tokens" in capsys.readouterr().out


def test_train_commands_write_bound_artifacts(tmp_path, capsys):
    from specdec.proposers.heads import MedusaProposer
    from specdec.cli import main as train_main
    from specdec.training.distilled_drafter import load_drafter

    a = _save_model(tmp_path / "a", 0)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": i, "category": "qa", "turns": [f"w{i} w{i + 1} w3"]}) + "\n"
                               for i in range(10)))
    common = ["--target", str(tmp_path / "a"), "--prompts", str(prompts), "--max-new-tokens", "6",
              "--cache-dir", str(tmp_path / "cache"), "--heldout-every", "5", "--epochs", "1", "--device", "cpu"]
    assert (
        train_main(["train", "heads", "--out", str(tmp_path / "heads"), "--vocab", "0", "--heads", "2"] + common) == 0
    )
    assert train_main(["train", "draft", "--out", str(tmp_path / "draft"), "--layers", "1"] + common) == 0
    prop = MedusaProposer.load(str(tmp_path / "heads"), a)
    assert prop.heads.num_heads == 2 and len(prop.rank_acc) == 2
    drafter, manifest = load_drafter(str(tmp_path / "draft"), a)
    assert manifest.training["data_source"] == "cached responses"  # generated once by `train heads`
    assert main(["check", "--target", str(tmp_path / "a"), "--proposer", str(tmp_path / "heads")]) == 0
