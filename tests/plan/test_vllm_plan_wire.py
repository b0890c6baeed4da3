"""What the vLLM plan reads off the wire, against streams and /metrics recorded from vLLM 0.32's CPU build."""

import json
import time
from pathlib import Path

import pytest

from fake_vllm_server import FakeServer
from specdec.plan.vllm.launcher import ServeCommand, Server, ServerRefused, refusal_reason
from specdec.plan.vllm.kv_budget import admitted, predict_blocks
from specdec.plan.vllm.server_metrics import MetricsError, cache_info, parse_prometheus, spec_counters
from specdec.plan.vllm.stream import SSEAccumulator, drive, request_body, stream_request

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_plan"
# the tiny Llama the fixtures were recorded with (2 layers, 1 KV head of 64, float32: 1024 KV bytes a token)
TINY = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
        "hidden_size": 128, "torch_dtype": "float32"}


def _replay(text: str, dt: float = 0.01):
    acc = SSEAccumulator(0, 0.0)
    for i, line in enumerate(text.splitlines()):
        acc.feed(line, 0.1 + dt * i)
    return acc


def test_a_recorded_completions_stream_gives_every_chunk_its_tokens():
    acc = _replay((DATA / "sse_completions_ngram.txt").read_text())
    r = acc.finish()
    assert r.ok, r.error
    assert r.tokens == 12 and r.completion_tokens == 12 and r.prompt_tokens == 13
    assert r.chunk_tokens == [1] * 10 + [2]  # the last step accepted an ngram draft: two tokens in one chunk
    assert r.token_ids[:2] == [3950, 14236] and r.finish_reason == "length"
    assert r.ttft == pytest.approx(0.1) and r.tpot > 0


def test_a_stream_cut_short_is_an_error_never_a_measurement():
    lines = (DATA / "sse_completions_ngram.txt").read_text().splitlines()
    cut = "\n".join(lines[: len(lines) // 2])
    r = _replay(cut).finish()
    assert not r.ok and r.error.startswith("stream cut short after ") and "without data: [DONE]" in r.error
    assert _replay(cut).finish("ConnectionResetError: peer").error.endswith("ConnectionResetError: peer")


@pytest.mark.parametrize("line, message", [
    ('data: {"error": {"message": "boom"}}', "server error mid-stream: boom"),
    ('data: {"choices": [{"text": "hi"}]}', "without token_ids"),
    ("data: {not json", "a chunk is not JSON"),
])
def test_bad_chunks_are_named(line, message):
    acc = SSEAccumulator(0, 0.0)
    acc.feed(line, 1.0)
    assert message in acc.finish().error


def test_usage_that_disagrees_with_the_chunks_means_lost_chunks():
    acc = SSEAccumulator(0, 0.0)
    acc.feed('data: {"choices": [{"text": "a", "token_ids": [5]}]}', 1.0)
    acc.feed('data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}', 1.1)
    acc.feed("data: [DONE]", 1.2)
    assert "usage says 4 completion tokens but the chunks carried 1" in acc.finish().error


def test_recorded_metrics_give_vllms_speculative_counters_and_kv_cache():
    text = (DATA / "metrics_ngram.txt").read_text()
    c = spec_counters(text)
    assert (c.drafts, c.draft_tokens, c.accepted, c.per_pos) == (3.0, 8.0, 2.0, (1.0, 1.0, 0.0))
    assert c.speculating and c.generation_tokens == 12.0
    cache = cache_info(text)
    assert (cache.num_blocks, cache.block_size, cache.kv_cache_memory_bytes) == (512, 128, 1 << 26)
    off = "\n".join(line for line in text.splitlines() if "spec_decode" not in line)
    assert not spec_counters(off).speculating and spec_counters(off).per_pos == ()
    with pytest.raises(MetricsError, match="differently configured"):
        spec_counters(off).minus(c)
    with pytest.raises(MetricsError, match="went down"):
        spec_counters(off.replace("12.0", "3.0")).minus(spec_counters(off))


def test_malformed_metrics_are_named():
    with pytest.raises(MetricsError, match="line 2 is not a Prometheus sample"):
        parse_prometheus("# comment\nthis is not a sample\n")
    with pytest.raises(MetricsError, match="no vllm:cache_config_info"):
        cache_info("vllm:generation_tokens_total 3.0\n")


def test_the_draft_models_kv_cost_is_predicted_from_configs_as_vllm_measured_it():
    """The recorded draft_model server (the tiny model drafting for itself, 64 MiB of KV) allocated 256
    blocks to off's 512: the draft's layers share every block. The prediction from the two configs agrees."""
    off, draft = cache_info((DATA / "metrics_ngram.txt").read_text()), cache_info(
        (DATA / "metrics_draft_model.txt").read_text())
    assert draft.num_blocks == 256
    assert predict_blocks(off, TINY, TINY, draft_weights=50 << 20, dtype="float32") == draft.num_blocks
    assert predict_blocks(off, TINY, None, 0, dtype=None) == off.num_blocks  # a lookup drafter holds nothing
    assert (admitted(off, 300), admitted(draft, 300, lookahead=4)) == (512 // 3, 256 // 3)  # 3 blocks each


@pytest.mark.parametrize("log, reason", [
    ("refusal_suffix.log", "ImportError: Arctic Inference is required for suffix decoding."),
    ("refusal_eagle3.log", "ValueError: There is no module or parameter named 'model' in LlamaModel."),
    ("refusal_mtp.log", "NotImplementedError: Unsupported speculative method: 'mtp'"),
])
def test_vllms_own_reason_is_read_from_a_refused_servers_log(log, reason):
    assert refusal_reason((DATA / log).read_text()).startswith(reason)


def test_a_server_vllm_refuses_is_reported_with_the_reason_from_its_log(tmp_path):
    log = DATA / "refusal_suffix.log"
    cmd = ServeCommand(f"python -c \"import sys; sys.stdout.write(open('{log}').read()); sys.exit(1)\" {{port}} "
                       "{speculative_config}")
    server = Server.launch("suffix:4", cmd, {"method": "suffix", "num_speculative_tokens": 4}, tmp_path / "s.log")
    with pytest.raises(ServerRefused) as err:
        server.wait_ready(60)
    assert err.value.reason.startswith("ImportError: Arctic Inference is required")
    server.stop()


@pytest.mark.parametrize("text, message", [
    ("vllm serve m --port 8000", "must hold {speculative_config} exactly once"),
    ("vllm serve m --port {port} --x={speculative_config}", "must hold {speculative_config} exactly once"),
    ("vllm serve m {speculative_config}", "must hold {port}"),
    ("vllm serve m --port {port} {speculative_config} {gpu}", "unknown placeholders ['{gpu}']"),
    ("vllm serve m --port {port} --speculative-config x {speculative_config}", "leave --speculative-config out"),
    ("vllm serve 'm", "cannot split"),
])
def test_a_bad_serve_command_is_refused(text, message):
    with pytest.raises(ValueError) as err:
        ServeCommand(text)
    assert message in str(err.value)


def test_the_serve_command_expands_per_candidate():
    cmd = ServeCommand("vllm serve /m --port {port} --max-num-seqs=16 {speculative_config} --dtype float32")
    assert cmd.expand(7, None) == ["vllm", "serve", "/m", "--port", "7", "--max-num-seqs=16", "--dtype", "float32"]
    on = cmd.expand(7, {"method": "ngram", "num_speculative_tokens": 2})
    assert on[5:7] == ["--max-num-seqs=16", "--speculative-config"] and json.loads(on[7])["method"] == "ngram"
    assert cmd.model() == "/m" and cmd.option("--max-num-seqs") == "16" and cmd.option("--dtype") == "float32"


def test_the_client_reads_a_served_stream_and_names_an_http_error():
    server = FakeServer({"method": "ngram", "num_speculative_tokens": 3})
    try:
        path, body = request_body("chat", "fake", {"turns": ["hello there"]}, {"max_tokens": 9, "temperature": 0.0})
        r = stream_request(server.url, path, body, index=0, timeout=30)
        assert r.ok and r.tokens == 9 and r.completion_tokens == 9 and sum(r.chunk_tokens) == 9
        body.pop("return_token_ids")
        bad = stream_request(server.url, path, body, index=1, timeout=30)
        assert bad.error.startswith("HTTP 400") and "token ids" in bad.error
    finally:
        server.stop()


def test_a_stream_the_server_cuts_short_comes_back_as_an_error():
    server = FakeServer(None, cut_after=3)
    try:
        path, body = request_body("completions", "fake", {"turns": ["x y"]}, {"max_tokens": 8})
        r = stream_request(server.url, path, body, index=0, timeout=30)
        assert not r.ok and r.error.startswith("stream cut short after 3 tokens")
    finally:
        server.stop()


def test_drive_sends_at_the_arrival_times_and_keeps_the_order():
    server = FakeServer(None)
    try:
        reqs = [request_body("chat", "fake", {"turns": [f"prompt {i}"]}, {"max_tokens": 4}) for i in range(5)]
        out = drive(server.url, reqs, [0.0, 0.0, 0.05, 0.1, 0.1], timeout=30)
        assert [r.index for r in out] == list(range(5)) and all(r.ok for r in out)
        assert out[3].sent - out[0].sent >= 0.09
    finally:
        server.stop()


class _Dying:
    """A server whose process is reaped ``after`` seconds from now."""

    def __init__(self, after):
        self.until = time.monotonic() + after

    def alive(self):
        return time.monotonic() < self.until


def test_a_request_cut_by_a_dying_server_waits_to_see_the_death():
    from specdec.plan.vllm.measure import alive_after
    assert not alive_after(_Dying(0.3), grace=5.0)  # reaped within the grace: the death, not a failed request
    t0 = time.monotonic()
    assert alive_after(_Dying(60.0), grace=0.3) and time.monotonic() - t0 < 2.0  # still up: the request failed
    assert alive_after(_Dying(60.0), grace=0.0)
