"""Bad command lines: one line naming the problem, exit status 2, before any model loads; and bad
artifacts named by file."""

import json

import pytest
import torch

from specdec import cli


@pytest.fixture
def no_model_load(monkeypatch):
    """Any attempt to load a target fails the test: the error must come first."""
    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the bad input was refused")

    import importlib

    import specdec.models

    # Every module that binds load_target at import is imported (and patched) here: one first
    # imported inside a patched test would keep the refusal after monkeypatch undoes the rest.
    modules = [importlib.import_module(f"specdec.cli.{n}") for n in ("common", "plan", "train", "bench", "generate",
                                                                     "review")]
    for module in modules:  # all imported before any is patched
        monkeypatch.setattr(module, "load_target", refuse)
    monkeypatch.setattr(specdec.models, "load_target", refuse)  # modules importing it when they run


def _run(argv, capsys):
    """``(exit status, stderr)`` of one command line, whether argparse or the command refused it."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


BAD = [
    (["generate", "--temperature", "-1", "hi"], "--temperature: must be >= 0.0, got -1.0"),
    (["generate", "--top-k", "0", "hi"], "--top-k: must be >= 1, got 0"),
    (["generate", "--top-p", "1.5", "hi"], "--top-p: must be <= 1.0, got 1.5"),
    (["generate", "--max-new-tokens", "0", "hi"], "--max-new-tokens: must be >= 1, got 0"),
    (["generate", "--budget", "-3", "hi"], "--budget: must be 'auto' or an int >= 0, got -3"),
    (["generate", "--threads", "0", "hi"], "--threads: must be >= 1, got 0"),
    (["generate", "--model", "/no/such/model", "hi"], "'/no/such/model' is neither 'default', a .gguf file"),
    (["generate", "--model", "/no/such.gguf", "hi"], "no such GGUF file"),
    (["generate", "--proposer", "magic", "hi"], "unknown proposer spec 'magic'"),
    (["generate", "--proposer", "medusa:/no/such/dir", "hi"], "no such directory '/no/such/dir'"),
    (["generate", "--proposer", "suffix:/no/such.jsonl", "hi"], "no such responses file"),
    (["generate", "--proposer", "suffix", "--proposer", "none", "hi"], "generate takes one proposer"),
    (["bench", "--proposers", "suffix,medusa"], "unknown proposer spec 'medusa'"),
    (["bench", "--categories", "nonsense"], "unknown categories ['nonsense']"),
    (["bench", "--proposer", "none"], "plain decoding, which bench always runs"),
    (["bench", "--per-category", "0"], "--per-category: must be >= 1"),
    (["bench", "--cost", "/no/such/cost.json"], "cannot read verify cost file"),
    (["plan", "--memory-gb", "0"], "--memory-gb: must be > 0.0"),
    (["plan", "--memory-gb", "1", "--loads", "0.5,1.5"], "must be <= 1.0, got 1.5"),
    (["plan", "--memory-gb", "1", "--categories", "nonsense"], "unknown categories ['nonsense']"),
    (["plan", "--memory-gb", "1", "--max-batched-tokens", "2048"], "add --scheduler packed"),
    (["plan", "--memory-gb", "1", "--scheduler", "orca"], "invalid choice: 'orca'"),
    (["plan", "--memory-gb", "1", "--max-batch", "0"], "--max-batch: must be >= 1, got 0"),
    (["plan", "--memory-gb", "1", "--cost-off", "off.json"], "--cost-off pairs with --cost"),
    (["plan", "--memory-gb", "1", "--acceptance", "suffix"], "--acceptance takes SPEC=FILE, got 'suffix'"),
    (["plan", "--memory-gb", "1", "--acceptance", "ngram=a.json"], "names 'ngram', which is not a drafting proposer"),
    (["plan", "--memory-gb", "1", "--acceptance", "suffix=/no/such.json"], "no such acceptance file '/no/such.json'"),
    (["check", "--proposer", "lookahead"], "unknown proposer spec 'lookahead'"),
    (["review", "/no/such/plan"], "run `specdec plan` first"),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2_before_the_model_loads(argv, message, capsys, no_model_load):
    code, err = _run(argv, capsys)
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err


def test_bad_pool_keys_are_named_before_the_model_loads(tmp_path, capsys, no_model_load):
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "off"\nspeed = 3\n')
    code, err = _run(["plan", "--memory-gb", "1", "--pools", str(pools)], capsys)
    assert code == 2 and "speed" in err and ("pools.a" in err or str(pools) in err), err


def test_the_same_flag_names_everywhere():
    parser = cli.build_parser()
    for argv in (["generate", "--target", "default", "x"], ["bench", "--target", "default"],
                 ["plan", "--target", "default", "--memory-gb", "1"], ["check", "--target", "default",
                                                                      "--proposer", "suffix"]):
        assert parser.parse_args(argv).model == "default"
    args = parser.parse_args(["bench", "--proposer", "suffix", "--proposers", "none"])
    from specdec.cli.args import proposers

    assert proposers(args) == ["suffix", "none"]
    assert proposers(parser.parse_args(["plan", "--memory-gb", "1", "--proposer", "none"])) == ["none"]
    assert parser.parse_args(["check", "--proposer", "none"]).proposer == "none"


# ---------------------------------------------------------------- artifacts named by file

def _medusa_artifact(tmp_path, model):
    from specdec.artifacts import Manifest, save_artifact, target_fingerprint
    from specdec.proposers.heads import MedusaHeads

    H = model.config.hidden_size
    heads = MedusaHeads(H, 2)
    manifest = Manifest(kind="medusa", name="m", bound_to="target", fingerprint=target_fingerprint(model),
                        config={"hidden_size": H, "num_heads": 2, "num_layers": 1, "rank_acc": [[0.5, 0.2]] * 2})
    save_artifact(str(tmp_path), heads.state_tensors(), manifest)
    return tmp_path


def test_corrupted_artifacts_name_the_file_and_the_problem(tmp_path):
    from specdec.models import tiny_model
    from specdec.proposers.registry import make_proposer

    model = tiny_model("llama")
    art = _medusa_artifact(tmp_path / "a", model)
    assert make_proposer(f"medusa:{art}", model, None) is not None
    (art / "manifest.json").write_text('{"format": ')
    with pytest.raises(ValueError, match=r"manifest\.json: not valid JSON .*corrupted"):
        make_proposer(f"medusa:{art}", model, None)
    art = _medusa_artifact(tmp_path / "b", model)
    (art / "weights.safetensors").write_bytes(b"\x00" * 12)
    with pytest.raises(ValueError, match=r"weights\.safetensors: cannot read the artifact's weights"):
        make_proposer(f"medusa:{art}", model, None)
    art = _medusa_artifact(tmp_path / "c", model)
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["config"]["num_layers"] = 3  # an edited config: the weights no longer fit
    (art / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"do not fit the config in its manifest\.json.*missing"):
        make_proposer(f"medusa:{art}", model, None)


def test_allow_mismatch_loads_a_stale_artifact_loudly(tmp_path, capsys):
    from specdec.artifacts import IncompatibleArtifactError
    from specdec.cli.common import make_proposer
    from specdec.models import tiny_model

    art = _medusa_artifact(tmp_path, tiny_model("llama"))
    other = tiny_model("llama", seed=1)
    with pytest.raises(IncompatibleArtifactError, match=r"--allow-mismatch.*|dtype included"):
        make_proposer(f"medusa:{art}", other)
    with pytest.warns(RuntimeWarning, match="loading anyway"):
        assert make_proposer(f"medusa:{art}", other, allow_mismatch=True) is not None
    assert "WARNING: --allow-mismatch" in capsys.readouterr().err
    assert torch.is_grad_enabled()


def test_an_imported_acceptance_is_checked_against_the_planned_budget(tmp_path, capsys, no_model_load):
    chain = tmp_path / "acceptance-specdec.json"  # what plan_vs_measured writes from vLLM's counters (k = 4)
    chain.write_text(json.dumps({"counts": [50, 20, 10, 5, 15], "drafted": [10, 0, 0, 40, 50], "counters": {}}))
    code, err = _run(["plan", "--memory-gb", "1", "--acceptance", f"suffix={chain}"], capsys)
    assert code == 2 and "measured with 4 draft tokens per step; plan with --max-budget 4 or less" in err, err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"counts": [1, -2]}))
    code, err = _run(["plan", "--memory-gb", "1", "--max-budget", "1", "--acceptance", f"suffix={bad}"], capsys)
    assert code == 2 and str(bad) in err and "must be finite and >= 0" in err, err
    twice = ["--acceptance", f"suffix={chain}"] * 2
    code, err = _run(["plan", "--memory-gb", "1", "--max-budget", "4", *twice], capsys)
    assert code == 2 and "names 'suffix' twice" in err, err
