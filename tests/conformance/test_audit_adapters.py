"""Adapter plumbing without a real engine: the vLLM server adapter against a stand-in server, the
worker protocol's restarts, llvmlite hidden from vLLM's kernel registry.

The stand-in server answers ``/v1/completions`` the way vLLM's OpenAI server does with ``return_token_ids``
(and with a 400 and vLLM's message for ``min_p`` under speculation), and ``/metrics`` with vLLM's
speculative counters; it records every request so the test can read what the adapter sent.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec.conformance.audit import EngineFailed, Job, Refused, Sampling, Samples
from specdec.conformance.audit.adapters.vllm_server import VLLMServerEngine
from specdec.conformance.audit.adapters.vllm_worker import without_llvmlite
from specdec.conformance.audit.adapters.worker import EXIT_RESTART, run_jobs


def _server(speculative: bool):
    seen, counters = [], {"drafted": 0, "accepted": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code, payload, kind="application/json"):
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            text = (f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {counters["drafted"]}\n'
                    f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {counters["accepted"]}\n')
            self._send(200, text, "text/plain")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            if speculative and body["min_p"] > 0:
                return self._send(400, {"error": {"message": "The min_p and logit_bias sampling parameters are not "
                                                             "yet supported with speculative decoding."}})
            if body.get("top_k") == 1:
                return self._send(500, {"error": {"message": "EngineCore died"}})
            if speculative:
                counters["drafted"] += 3
                counters["accepted"] += 2
            toks = [body["prompt"][-1]] * body["max_tokens"]
            self._send(200, {"choices": [{"index": j, "text": "", "token_ids": toks} for j in range(body["n"])]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


@pytest.fixture
def servers():
    spec, seen_spec = _server(True)
    plain, seen_plain = _server(False)
    yield (f"http://127.0.0.1:{spec.server_port}", f"http://127.0.0.1:{plain.server_port}", seen_spec, seen_plain)
    spec.shutdown()
    plain.shutdown()


def test_server_adapter_maps_settings_and_reads_ids_and_acceptance(servers):
    url, plain_url, seen, seen_plain = servers
    engine = VLLMServerEngine(url, plain_url, "m", concurrency=4)
    s = Sampling(0.9, top_k=3, repetition_penalty=1.5, bad_tokens=(7,), stop_tokens=(3,), allowed_tokens=(1, 2, 3),
                 n=2, seeded=True, max_tokens=4)
    job = Job(((5, 6), (6, 2)), (s, s), 4, 100)
    out = engine.run([job], True)[0]
    assert isinstance(out, Samples) and out.outputs[0] == [[6] * 4] * 4 and out.outputs[1] == [[2] * 4] * 4
    assert (out.requests, out.drafted, out.accepted) == (4, 12, 8)
    body = next(b for b in seen if b["prompt"] == [5, 6])  # requests go out concurrently: any may arrive first
    assert body["return_token_ids"] and body["ignore_eos"]
    assert (body["top_k"], body["repetition_penalty"], body["bad_words"], body["stop_token_ids"], body["n"]) == \
        (3, 1.5, ["t7"], [3], 2)
    assert body["allowed_token_ids"] == [1, 2, 3]
    assert sorted(b["seed"] for b in seen) == [100, 102, 104, 106]  # stride n: no two outputs share a seed
    plain = engine.run([job], False)[0]
    assert isinstance(plain, Samples) and plain.accepted == 0 and len(seen_plain) == 4


def test_server_refusal_and_failure(servers):
    url, plain_url, _, _ = servers
    engine = VLLMServerEngine(url, plain_url, "m", concurrency=2)
    refused = engine.run([Job(((5,),), (Sampling(min_p=0.1),), 2, 0)], True)[0]
    assert isinstance(refused, Refused) and "min_p and logit_bias" in str(refused)
    broken = engine.run([Job(((5,),), (Sampling(top_k=1),), 2, 0)], True)[0]
    assert isinstance(broken, EngineFailed) and "500" in str(broken)
    with pytest.raises(ValueError, match="same server"):
        VLLMServerEngine(url, url, "m")


_FAKE_WORKER = """
import json, os, sys
req = json.load(open(sys.argv[1]))
out = open(sys.argv[2], "a")
for i, job in enumerate(req["jobs"]):
    if i < req["start"]:
        continue
    if job["seed"] == 13 and not os.environ.get("ONCE_DONE_" + str(req["start"])):
        out.write(json.dumps({"job": i, "error": "RuntimeError: kernel exploded"}) + "\\n")
        out.close()
        os._exit(%d)
    if job["seed"] == 99:
        os._exit(9)  # dies without a word
    outputs = [[[1, 2]] * job["n"] for _ in job["prompts"]]
    out.write(json.dumps({"job": i, "outputs": outputs, "drafted": 4, "accepted": 2, "requests": job["n"],
                          "seconds": 0.0}) + "\\n")
    out.flush()
""" % EXIT_RESTART


def test_worker_protocol_restarts_after_a_crash(tmp_path):
    """A job whose engine broke is an error, the jobs after it run in a fresh worker; a worker that dies
    without a word costs only the job it died in."""
    from specdec.conformance.audit.adapters.worker import job_json

    script = tmp_path / "fake_worker.py"
    script.write_text(_FAKE_WORKER)
    s = Sampling(max_tokens=2)
    jobs = [Job(((1,),), (s,), 2, seed) for seed in (1, 13, 2, 99, 3)]
    outcomes, _ = run_jobs(lambda req, out: [sys.executable, str(script), str(req), str(out)], {},
                           {"jobs": [job_json(j) for j in jobs]}, jobs, timeout=60)
    kinds = [type(o).__name__ for o in outcomes]
    assert kinds == ["Samples", "EngineFailed", "Samples", "EngineFailed", "Samples"], outcomes
    assert "kernel exploded" in str(outcomes[1]) and "exit 9" in str(outcomes[3])


def test_llvmlite_is_hidden_only_inside_the_block(monkeypatch):
    import types

    fake = types.ModuleType("llvmlite.binding.ffi")
    monkeypatch.setitem(sys.modules, "llvmlite.binding.ffi", fake)
    with without_llvmlite():
        assert "llvmlite.binding.ffi" not in sys.modules
    assert sys.modules["llvmlite.binding.ffi"] is fake


def test_llamacpp_stop_criterion_ignores_the_prompt_and_ends_after_the_stop_token():
    """llama-cpp-python hands the criterion the ids evaluated so far: the prompt on the first step. A prompt
    ending in a stop token must not end the request (the bug behind a 0.38-TV 'biased (engine)' stop case)."""
    from specdec.conformance.audit.adapters.llamacpp_worker import stop_after

    crit = stop_after(3, {3})
    assert not crit([5, 6, 3], None)  # the prompt's last token is a stop token: generation goes on
    assert not crit([5, 6, 3, 4], None)
    assert crit([5, 6, 3, 4, 3], None)  # an emitted stop token: what follows it is never yielded


@pytest.mark.parametrize("method", ["prompt_lookup", "specdec"])
def test_hf_adapter_counts_accepted_drafts_not_emitted_tokens(method):
    """Acceptance is what makes a case conclusive. specdec's verify forwards do not pass through the model's
    forward hooks, so counting hooked forwards read every token after the first as accepted (4.0 per request
    of 5 tokens): its count comes from the decoder's own metrics instead."""
    from specdec.conformance.audit.adapters.hf_engine import HFEngine
    from specdec.conformance.audit.fixtures import audit_prompts, audit_target

    model = audit_target()
    prompts = tuple(tuple(p) for p in audit_prompts(model, 2))
    s = Sampling(0.9, max_tokens=5)
    out = HFEngine(model, method, k=3).run([Job(prompts, (s, s), 20, 7)], True)[0]
    assert isinstance(out, Samples) and out.requests == 40, out
    emitted = out.extra["emitted"]
    assert 0 < out.accepted < emitted - out.requests, (out.accepted, emitted)  # some drafts land, some are rejected
    assert out.drafted is None or out.drafted > out.accepted
