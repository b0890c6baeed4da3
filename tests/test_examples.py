"""The examples run on the tiny model, so they cannot rot."""

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_custom_loop_runs_and_shows_speculation(capsys):
    out = load("custom_loop").main([])
    assert len(out) == 40 and all(0 <= t < 64 for t in out)
    printed = capsys.readouterr().out
    steps = int(printed.split(" tokens in ")[1].split()[0])
    assert steps < 30, printed  # drafts were accepted: fewer verify steps than tokens
    load("custom_loop").main(["--max-new-tokens", "20", "--temperature", "0.7"])


def test_compare_proposers_runs():
    table = load("compare_proposers").main(["--tiny", "--max-new-tokens", "12"])
    overall = table["overall"]
    assert set(overall) == {"plain", "suffix (cost model)", "suffix (8 nodes)"}
    assert all(row.mismatches == 0 and row.tokens > 0 for row in overall.values())
    assert overall["suffix (8 nodes)"].accepted_drafts_per_step > 0
