"""The vLLM plan's pool file: what parses, and every bad file refused by name before any server starts."""

import json

import pytest

from plan_fixtures import PROMPTS, pool_toml, toml_table
from specdec.cli import main
from specdec.plan.vllm.pool_spec import PoolFileError, load_pool_file, parse_pool_file, pool_from_description

GOOD = (toml_table("defaults", prompts=PROMPTS, requests=4)
        + pool_toml("interactive", share=0.75, ttft_s=2.0, tpot_s=0.15, rates=[0.5, 4.0],
                    categories=["extraction", "summarization", "rag", "translation"], sampling={"max_tokens": 32})
        + pool_toml("bulk", share=0.25, objective="throughput", ttft_s=30.0, tpot_s=1.0, rates=[0.25, 2.0],
                    categories=["writing", "roleplay", "reasoning"], api="completions",
                    sampling={"temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 3}))


def test_a_good_file_parses_with_its_prompts_round_robin_by_category():
    pools = parse_pool_file(GOOD)
    assert list(pools) == ["interactive", "bulk"]
    inter, bulk = pools["interactive"], pools["bulk"]
    assert inter.share == 0.75 and inter.objective == "latency" and inter.rates == (0.5, 4.0)
    assert len(inter.prompts) == 4 and len(inter.warmup) == 2
    # six prompts round-robin over four categories: the measured four cover three of them at least
    assert len({r["category"] for r in inter.prompts + inter.warmup}) == 4
    assert inter.sampling.greedy and inter.sampling.body()["max_tokens"] == 32 and "top_k" not in inter.sampling.body()
    assert not bulk.sampling.greedy and bulk.sampling.body()["top_k"] == 40 and bulk.sampling.body()["seed"] == 3
    assert bulk.api == "completions" and bulk.objective == "throughput"
    assert abs(sum(inter.mix.values()) - 1) < 1e-9


def test_a_pool_rebuilds_from_its_recorded_description():
    pool = parse_pool_file(GOOD)["bulk"]
    again = pool_from_description(json.loads(json.dumps(pool.describe())))
    assert again.prompts == pool.prompts and again.sampling == pool.sampling and again.rates == pool.rates


def _one(extra: str, *, pool_lines: str = "", share: float = 1.0, requests: int = 4) -> str:
    return (pool_toml("p", share=share, ttft_s=1.0, tpot_s=0.1, rates=[0.5, 2.0], prompts=PROMPTS, requests=requests)
            + f"{pool_lines}\n{extra}\n")


BAD = [
    ("not toml [", "not valid TOML"),
    ("[other]\nx = 1", "unknown top-level keys ['other']"),
    ("[defaults]\nprompts = 'x'", "no pools defined"),
    (_one("", pool_lines="colour = 'red'"), "pools.p: unknown keys ['colour']"),
    (_one("[pools.p.sampling]\ntemprature = 0.5"), "pools.p.sampling: unknown keys ['temprature']"),
    (_one("[pools.p.sampling]\ntemperature = -1"), "pools.p.sampling.temperature must be >= 0.0"),
    (_one("[pools.p.sampling]\ntop_p = 0"), "pools.p.sampling.top_p must be > 0.0"),
    (_one("[pools.p.sampling]\nmax_tokens = 0"), "pools.p.sampling.max_tokens must be >= 1"),
    (_one("[pools.p.sampling]\nignore_eos = 'yes'"), "pools.p.sampling.ignore_eos must be true or false"),
    (_one("", share=0.5), "the pools' shares sum to 0.5, not 1"),
    (_one("", pool_lines="objective = 'fast'"), "pools.p.objective must be one of"),
    (_one("", pool_lines="api = 'grpc'"), "pools.p.api must be one of"),
    (_one("", pool_lines="categories = []"), "pools.p.categories must be a non-empty list"),
    (_one("", pool_lines="categories = ['poetry']"), "pools.p.prompts: unknown categories ['poetry']"),
    (_one("", requests=500), "the pool measures requests = 500 plus 2 for warm-up: lower requests"),
    (_one("", requests=0), "pools.p.requests must be >= 1"),
    ("[pools.p]\nshare = 1.0", "pools.p: missing required key 'ttft_s'"),
    ("[pools.empty]\n", "pools.empty: missing required key 'share'"),
    ("pools = 3", "no pools defined"),
]


@pytest.mark.parametrize("text, message", BAD)
def test_every_bad_pool_file_is_refused_by_name(text, message):
    with pytest.raises(PoolFileError) as err:
        parse_pool_file(text, "pools.toml")
    assert message in str(err.value) and str(err.value).startswith("pools.toml: ")


def test_rates_must_rise_and_be_positive():
    with pytest.raises(PoolFileError, match=r"pools.p.rates must rise: low 2.0 < high 1.0"):
        parse_pool_file(_one("").replace("rates = [0.5, 2.0]", "rates = [2.0, 1.0]"))
    with pytest.raises(PoolFileError, match=r"pools.p.rates\[0\].* must be > 0.0"):
        parse_pool_file(_one("").replace("rates = [0.5, 2.0]", "rates = [0, 1.0]"))
    with pytest.raises(PoolFileError, match=r"pools.p.rates must be \[low, high\]"):
        parse_pool_file(_one("").replace("rates = [0.5, 2.0]", "rates = 2.0"))


def test_an_empty_pool_is_refused_with_its_name(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    text = _one("").replace(str(PROMPTS), str(empty))
    with pytest.raises(PoolFileError, match=r"pools.p.prompts: no prompts selected"):
        parse_pool_file(text)


def test_a_missing_pool_file_or_prompt_file_is_named(tmp_path):
    with pytest.raises(PoolFileError, match="pool file .*nope.toml does not exist"):
        load_pool_file(tmp_path / "nope.toml")
    f = tmp_path / "pools.toml"
    f.write_text(_one("").replace(str(PROMPTS), "missing.jsonl"))
    with pytest.raises(PoolFileError, match=r"pools.p.prompts: prompt file .*missing.jsonl does not exist"):
        load_pool_file(f)


@pytest.mark.parametrize("text, message", [BAD[3], BAD[9], BAD[17]])
def test_the_command_refuses_a_bad_pool_file_before_any_server_starts(tmp_path, capsys, text, message):
    pools = tmp_path / "pools.toml"
    pools.write_text(text)
    marker = tmp_path / "started"
    # the "server" would leave a file behind; it must never run
    serve = f"touch {marker}-{{port}} {{speculative_config}}"
    code = main(["plan", "--engine", "vllm", "--pools", str(pools), "--serve", serve, "--max-batch", "4",
                 "--max-batched-tokens", "512", "--out", str(tmp_path / "out")])
    assert code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.glob("started*"))
