"""``specdec plan --engine vllm`` / ``specdec review --engine vllm`` on the command line (fake servers, no vLLM)."""

import json

import pytest

from plan_fixtures import PROMPTS, fake_serve, pool_toml
from specdec.cli import main

SERVE = fake_serve()
POOL = pool_toml("chat", share=1.0, ttft_s=1.0, tpot_s=0.02, rates=[2.0, 40.0], prompts=PROMPTS, requests=12,
                 sampling={"max_tokens": 16})


@pytest.fixture
def pools(tmp_path):
    f = tmp_path / "pools.toml"
    f.write_text(POOL)
    return f


@pytest.mark.parametrize("extra, message", [
    (["--memory-gb", "1"], "--memory-gb does not apply to --engine vllm"),
    (["--proposer", "suffix", "--scheduler", "packed"], "--proposer, --scheduler do not apply to --engine vllm"),
    (["--server", "off=http://127.0.0.1:1"], "give either --serve CMD"),
    (["--candidates", "ngram:2,beam"], "unknown method 'beam'"),
    (["--candidates", "eagle:2"], "needs the artifact: give --eagle-head PATH"),
])
def test_the_vllm_plan_refuses_bad_flags_before_any_server_starts(pools, tmp_path, capsys, extra, message):
    code = main(["plan", "--engine", "vllm", "--pools", str(pools), "--serve", SERVE, "--max-batch", "8",
                 "--max-batched-tokens", "2048", "--out", str(tmp_path / "o"), *extra])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o" / "logs").exists()


def test_the_servers_limits_must_be_known(pools, tmp_path, capsys):
    code = main(["plan", "--engine", "vllm", "--pools", str(pools), "--serve", SERVE, "--out", str(tmp_path)])
    assert code == 2 and "max_num_seqs and max_num_batched_tokens are needed" in capsys.readouterr().err


def test_the_specdec_engine_refuses_vllm_flags(capsys):
    assert main(["plan", "--memory-gb", "1", "--serve", "x"]) == 2
    assert "--serve does not apply to --engine specdec" in capsys.readouterr().err
    assert main(["review", "somewhere", "--requests", "4"]) == 2
    assert "--requests needs --engine vllm" in capsys.readouterr().err


def test_plan_then_review_on_the_command_line(pools, tmp_path, capsys):
    out = tmp_path / "plan"
    code = main(["plan", "--engine", "vllm", "--pools", str(pools), "--serve", SERVE, "--max-batch", "8",
                 "--max-batched-tokens", "2048", "--candidates", "off,ngram:3", "--no-schedules", "--levels", "3",
                 "--requests", "50", "--replications", "1", "--bursts", "3", "--no-drift-check", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "chat: speculate with ngram (K = 3)" in printed
    assert not list((out / "runs").glob("*__drift*.json"))  # off was not started again
    assert json.loads((out / "plan.json").read_text())["pools"]["chat"]["drift"]["shift"] is None
    assert sorted(p.name for p in (out / "runs").glob("ngram-3__chat__burst*.json")) == [
        "ngram-3__chat__burst.json", "ngram-3__chat__burst2.json", "ngram-3__chat__burst3.json"]
    assert json.loads((out / "plan.json").read_text())["pools"]["chat"]["overload_noise"]["bursts"] == 3
    assert json.loads((out / "chat.speculative_config.json").read_text())["num_speculative_tokens"] == 3
    code = main(["review", "--engine", "vllm", str(out), "--requests", "8"])
    text = capsys.readouterr().out
    assert code == 0 and "| chat | **keep** |" in text
    again = tmp_path / "again"  # the same plan made again from its record, with no server
    code = main(["plan", "--engine", "vllm", "--replay", str(out), "--out", str(again)])
    printed = capsys.readouterr().out
    decided = "speculate with ngram (K = 3)"
    assert code == 0 and f"recorded: {decided}" in printed and f"today:    {decided}" in printed
    assert json.loads((again / "plan.json").read_text())["simulation"] == json.loads(
        (out / "plan.json").read_text())["simulation"] == {"levels": 3, "sim_requests": 50, "replications": 1,
                                                            "seed": 0, "gap": 0.012, "schedules": False}
    assert (again / "chat.speculative_config.json").read_text() == (out / "chat.speculative_config.json").read_text()
    assert main(["plan", "--engine", "vllm", "--replay", str(out), "--replications", "2", "--levels", "4", "--out",
                 str(tmp_path / "more")]) == 0
    printed = capsys.readouterr().out
    assert "note: replications 2 (recorded: 1)" in printed and "note: levels 4 (recorded: 3)" in printed
    assert len(json.loads((tmp_path / "more" / "plan.json").read_text())["pools"]["chat"]["rates"]) == 4


@pytest.mark.parametrize("extra, message", [
    (["--pools", "p.toml"], "--pools comes from the record with --replay"),
    (["--serve", SERVE, "--max-batch", "8"], "--serve, --max-batch come from the record with --replay"),
    (["--model", "HuggingFaceTB/SmolLM2-135M-Instruct"], "--model comes from the record with --replay"),
    (["--bursts", "3"], "--bursts comes from the record with --replay"),
    (["--no-drift-check"], "--no-drift-check comes from the record with --replay"),
    (["--memory-gb", "1"], "--memory-gb does not apply to --engine vllm"),
])
def test_a_replay_refuses_what_its_record_decides(tmp_path, capsys, extra, message):
    code = main(["plan", "--engine", "vllm", "--replay", str(tmp_path), "--out", str(tmp_path / "o"), *extra])
    assert code == 2 and message in capsys.readouterr().err


def test_a_replay_needs_a_plan_folder_and_another_to_write(tmp_path, capsys):
    assert main(["plan", "--engine", "vllm", "--replay", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "not a folder that specdec plan --engine vllm wrote" in capsys.readouterr().err
    assert main(["plan", "--engine", "vllm", "--replay", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "the replay would overwrite the recorded plan" in capsys.readouterr().err
    assert main(["plan", "--memory-gb", "1", "--replay", str(tmp_path)]) == 2
    assert "--replay does not apply to --engine specdec" in capsys.readouterr().err
    assert main(["plan", "--engine", "vllm", "--replay", str(tmp_path), "--levels", "1", "--out",
                 str(tmp_path / "o")]) == 2
    assert "--levels must be >= 2" in capsys.readouterr().err


def test_a_plan_needs_at_least_one_burst(pools, tmp_path, capsys):
    """--bursts 0 is refused by the parser, and PlanSettings refuses it by name, before any server."""
    from specdec.plan.vllm.candidates import parse_candidates
    from specdec.plan.vllm.engine_trace import Engine
    from specdec.plan.vllm.run_plan import PlanSettings

    with pytest.raises(SystemExit):
        main(["plan", "--engine", "vllm", "--pools", str(pools), "--serve", SERVE, "--bursts", "0",
              "--out", str(tmp_path)])
    assert "--bursts" in capsys.readouterr().err
    with pytest.raises(ValueError, match="bursts is too small: 0"):
        PlanSettings(parse_candidates("off", {}), Engine(8, 2048), bursts=0)
    assert not (tmp_path / "logs").exists()
