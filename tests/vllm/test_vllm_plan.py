"""``specdec plan --engine vllm`` on real vLLM servers (CPU build): the config it writes is served exactly.

A short plan on a tiny Llama (SmolLM2's tokenizer and chat template, random weights) measures off
and ngram on two real ``vllm.entrypoints.openai.api_server`` processes. The thresholds are set so
that any exact speculating candidate is eligible: the point here is not whether ngram pays on a
random model but that the ``speculative_config`` the plan writes is one vLLM starts with as it is,
and that the engine started from that file serves the pool's prompts greedily token for token as
off served them (off's outputs are those the plan recorded). The schedule the plan derives is
checked against vLLM's own lookup table builder.
"""

import json
import shutil
import sys

import pytest

from engines import smollm2_dir, tiny_llama
from plan_fixtures import PROMPTS, pool_toml


@pytest.fixture(scope="module")
def tiny_chat(tmp_path_factory):
    """A tiny random Llama with SmolLM2's vocabulary, tokenizer and chat template (a server needs them)."""
    folder = tiny_llama(tmp_path_factory.mktemp("tiny") / "llama", vocab=49152)
    source = smollm2_dir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"):
        if (source / name).exists():
            shutil.copy(source / name, folder / name)
    return folder


def test_a_short_plan_writes_a_config_vllm_starts_with_and_serves_exactly(tiny_chat, tmp_path):
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs

    from specdec.plan.vllm.candidates import parse_candidates
    from specdec.plan.vllm.decide import Thresholds
    from specdec.plan.vllm.launcher import ServeCommand
    from specdec.plan.vllm.measure import PoolRun
    from specdec.plan.vllm.run_plan import PlanSettings, ServerSource, plan_vllm
    from specdec.plan.vllm.pool_spec import load_pool_file
    from specdec.plan.vllm.engine_trace import Engine
    from specdec.plan.vllm.summary import write

    pool_file = tmp_path / "pools.toml"
    pool_file.write_text(pool_toml("copy", share=1.0, ttft_s=2.0, tpot_s=0.2, rates=[1.0, 6.0], prompts=PROMPTS,
                                   categories=["extraction", "summarization", "rag", "translation"], requests=8,
                                   sampling={"max_tokens": 24}))
    pools = load_pool_file(pool_file)
    serve = (f"{sys.executable} -m vllm.entrypoints.openai.api_server --model {tiny_chat} --host 127.0.0.1 "
             "--port {port} --dtype float32 --max-model-len 1024 --max-num-seqs 4 --max-num-batched-tokens 1024 "
             "--kv-cache-memory-bytes 67108864 --enforce-eager --seed 0 --disable-uvicorn-access-log "
             "{speculative_config}")
    permissive = Thresholds(min_gain=0.0, min_tpot_gain=0.0, max_loss=0.99, margin=0.0)
    settings = PlanSettings(parse_candidates("off,ngram:3", {}), Engine(4, 1024), permissive, levels=2,
                            sim_requests=40, replications=1, schedules=False, target=str(tiny_chat),
                            dtype="float32", start_timeout=600, request_timeout=120)
    out = tmp_path / "plan"
    result = plan_vllm(pools, settings, ServerSource(out / "logs", command=ServeCommand(serve), start_timeout=600),
                       out, log=print)
    write(result, out, serve=serve, servers=None)
    assert not result.refused and not result.failed, (result.refused, result.failed)
    o = result.pools["copy"]
    assert o.exact["ngram:3"] is True, "ngram's greedy outputs differed from off's in the plan's own runs"
    assert o.runs["ngram:3"].counters.drafts > 0 and o.runs["off"].cache.num_blocks == 512
    # off's server again after the last candidate: its full batches read against its first (the drift check)
    assert o.drift.shift is not None and (out / "runs" / "off__copy__drift2.json").is_file(), o.drift

    config = json.loads((out / "copy.speculative_config.json").read_text())
    ngram = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    if config is None:
        # The choice is measured: on a loaded machine ngram's CPU drafting can cost more than it saves. Then the
        # file says off, the sentence gives ngram's measured figures, and the config it measured is checked below.
        assert o.decision.chosen.name == "off" and "ngram:3" in o.decision.sentence, o.decision.sentence
        config = o.candidates["ngram:3"].config
    assert config == ngram
    assert json.loads((out / "review.json").read_text())["vllm_version"] == "0.32.0"

    # vLLM starts with the file's config as it is, and serves the pool's prompts as off served them
    EngineArgs(model=str(tiny_chat), dtype="float32", max_model_len=1024, enforce_eager=True,
               speculative_config=config).create_engine_config()
    off = PoolRun.from_dict(json.loads((out / "runs" / "off__copy.json").read_text()))
    llm = LLM(model=str(tiny_chat), speculative_config=config, dtype="float32", max_model_len=1024, max_num_seqs=4,
              enforce_eager=True, kv_cache_memory_bytes=1 << 26, seed=0)
    try:
        params = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=24)
        got = llm.chat([[{"role": "user", "content": r["turns"][0]}] for r in pools["copy"].prompts], params,
                       use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    assert [list(g.outputs[0].token_ids) for g in got] == [s.token_ids for s in off.streams]


@pytest.mark.parametrize("schedule, k, max_seqs", [
    ([(1, 4, 4), (5, 8, 2), (9, 64, 0)], 4, 64),
    ([(1, 16, 3), (32, 128, 2)], 3, 256),
    ([(1, 2, 5), (3, 3, 1)], 4, 16),
])
def test_the_schedule_lookup_is_vllms_own(schedule, k, max_seqs):
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    from specdec.plan.vllm.candidates import Candidate

    lookup = build_dynamic_sd_schedule_lookup([list(e) for e in schedule], max_seqs, k)
    c = Candidate("s", "ngram", k, schedule=tuple(schedule))  # a K above num_speculative_tokens is capped, as in vLLM
    assert [c.k_at(b) for b in range(1, max_seqs + 1)] == lookup[1:]


def test_a_schedule_config_the_plan_writes_is_one_vllm_accepts(tiny_chat):
    from vllm.engine.arg_utils import EngineArgs

    from specdec.plan.vllm.candidates import Candidate

    c = Candidate("ngram:sched", "ngram", 4, schedule=((1, 2, 4), (3, 6, 2), (7, 16, 0)))
    cfg = EngineArgs(model=str(tiny_chat), dtype="float32", max_model_len=1024, enforce_eager=True, max_num_seqs=16,
                     speculative_config=c.config).create_engine_config()
    assert [list(e) for e in cfg.speculative_config.num_speculative_tokens_per_batch_size] == c.config[
        "num_speculative_tokens_per_batch_size"]
