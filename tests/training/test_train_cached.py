"""`specdec train features | eagle3 | heads-kd | draft-kd` end to end on a tiny saved model."""

import json

import torch

from specdec import SpeculativeDecoder
from specdec.cli import main as check_main
from specdec.models import tiny_model
from specdec.proposers.eagle import EagleProposer
from specdec.proposers.heads import MedusaProposer
from specdec.cli import main as train_main
from specdec.training.distilled_drafter import load_drafter
from specdec.training.features import load_features

from test_sharegpt import word_tokenizer


def _setup(tmp_path):
    model = tiny_model(seed=11, layers=6)
    model.save_pretrained(tmp_path / "t")
    word_tokenizer().save_pretrained(tmp_path / "t")
    g = torch.Generator().manual_seed(1)
    recs = []
    for i in range(24):
        words = [f"w{int(x)}" for x in torch.randint(1, 60, (12,), generator=g)]
        recs.append({"id": str(i), "conversations": [{"from": "human", "value": " ".join(words[:4])},
                                                     {"from": "gpt", "value": " ".join(words[4:])}]})
    text = json.dumps(recs)
    (tmp_path / "sg.json").write_text(text[: len(text) - 40])  # cut inside the last record
    return model


def test_feature_cache_then_every_trainer_writes_a_loadable_bound_artifact(tmp_path, capsys):
    model = _setup(tmp_path)
    cache = str(tmp_path / "cache")
    base = ["--target", str(tmp_path / "t"), "--device", "cpu"]
    feat = ["train", "features", "--source", "sharegpt", "--sharegpt", str(tmp_path / "sg.json"), "--layers", "1,3,5",
            "--max-len", "32", "--top-k", "4", "--shard-tokens", "100", "--cache-dir", cache, "--no-progress"] + base
    assert train_main(feat + ["--max-tokens", "200"]) == 0
    (fdir,) = [p for p in (tmp_path / "cache").iterdir() if p.name.startswith("features-")]
    partial = json.loads((fdir / "progress.json").read_text())
    assert 200 <= partial["tokens"] < 300 and len(partial["shards"]) == 2 and partial["budget_reached"]
    assert train_main(feat) == 0  # resumes after the complete shards, runs to the end of the file
    done = json.loads((fdir / "progress.json").read_text())
    assert done["complete"] and done["sequences"] == 23 and done["shards"][:2] == partial["shards"]
    assert load_features(str(fdir)).num_sequences == 23
    (tmp_path / "other.json").write_text((tmp_path / "sg.json").read_text())
    other = [a if a != str(tmp_path / "sg.json") else str(tmp_path / "other.json") for a in feat]
    capsys.readouterr()
    assert train_main(other) == 2  # another file must not mix into the cache
    assert "holds features made with" in capsys.readouterr().err
    common = ["--features", str(fdir), "--heldout-every", "4", "--epochs", "2"] + base
    assert train_main(["train", "eagle3", "--out", str(tmp_path / "e3"), "--vocab", "0", "--steps", "2",
                       "--batch-tokens", "128", "--top-k", "2", "--max-depth", "3"] + common) == 0
    assert train_main(["train", "heads-kd", "--out", str(tmp_path / "hk"), "--vocab", "0", "--heads", "2",
                       "--batch-size", "32"] + common) == 0
    assert train_main(["train", "draft-kd", "--out", str(tmp_path / "dk"), "--layers", "1",
                       "--batch-tokens", "128"] + common) == 0
    prompt = [3, 9, 4, 17, 22, 5]
    plain = SpeculativeDecoder(model).generate(prompt, 12).tokens
    eagle = EagleProposer.load(str(tmp_path / "e3"), model)
    assert eagle.target_layers == (1, 3, 5) and eagle.top_k == 2
    medusa = MedusaProposer.load(str(tmp_path / "hk"), model)
    # Random words hold no greedy window (a token the target would have emitted), so the heads' measured
    # rank accuracies are 0 and their own static tree is empty: drafted here with a given tree shape.
    heads = MedusaProposer(medusa.heads, model.get_output_embeddings().weight, [[0.6, 0.3]] * 2, medusa.artifact)
    for prop in (eagle, heads):
        out = SpeculativeDecoder(model, prop, budget=4).generate(prompt, 12)
        # Two epochs on random words teach nothing to accept (the learning tests show what training learns):
        # this shows the loaded artifacts draft trees that verify exactly.
        assert out.tokens == plain and out.metrics.drafted > 0, type(prop).__name__
    drafter, manifest = load_drafter(str(tmp_path / "dk"), model)
    assert manifest.training["labels"] == "target top-k distribution (KD)"
    e3 = json.loads((tmp_path / "e3" / "manifest.json").read_text())
    assert e3["training"]["features"][0]["tokens"] == done["tokens"] and e3["config"]["architecture"] == "eagle3"
    capsys.readouterr()
    assert check_main(["check", "--target", str(tmp_path / "t"), "--proposer", str(tmp_path / "e3"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compatible"] and report["refit"]["device"] == "cpu"
    assert report["refit"]["extract_seconds"] == round(done["seconds"], 1)  # every cached token was used


def test_bad_flags_are_refused_before_the_model_loads(tmp_path, capsys):
    for argv, message in (
            (["train", "features", "--source", "selfdistill", "--target", str(tmp_path / "missing")],
             "--source selfdistill needs --prompts"),
            (["train", "features", "--sharegpt", str(tmp_path / "x.json"), "--target", str(tmp_path / "m")],
             "no such file"),
            (["train", "eagle3", "--features", str(tmp_path / "none"), "--out", str(tmp_path / "o"),
              "--target", str(tmp_path / "missing")], "no such feature cache")):
        assert train_main(argv) == 2
        assert message in capsys.readouterr().err
