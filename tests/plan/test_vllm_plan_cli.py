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
                 "--requests", "50", "--replications", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "chat: speculate with ngram (K = 3)" in printed
    assert json.loads((out / "chat.speculative_config.json").read_text())["num_speculative_tokens"] == 3
    code = main(["review", "--engine", "vllm", str(out), "--requests", "8"])
    text = capsys.readouterr().out
    assert code == 0 and "| chat | **keep** |" in text
