"""A bounded open-loop load generator for an OpenAI-compatible server on loopback, and its /metrics reader.

A thin caller of the library's client (``specdec.plan.vllm.stream`` and ``.metrics``, what
``specdec plan --engine vllm`` measures with), kept for the benchmarks written against this
interface (serve_bench.py, step_tax.py, plan_vs_measured.py).

``drive`` sends each prompt (token ids) as a streamed greedy ``/v1/completions`` request at
Poisson arrival times of ``rate`` per second (0: all at once), seeded, every request with a
timeout; it returns per request the time to first token, the time per output token after the
first (``(t_last - t_first) / (tokens - 1)``), the arrival time of every chunk that carried
tokens (``time.monotonic()``, one clock for all requests: the engine streams one chunk per
request per step), the output token ids as text (what outputs are compared by) and any error
(a stream cut short is an error). Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import asyncio
import math
import random


def percentile(values, q: float):
    """The q-th percentile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


async def drive(port: int, prompts: list[dict], *, rate: float | list[float], max_tokens: int, timeout: float,
                seed: int, model: str | None = None) -> list[dict]:
    """Send every prompt once at Poisson times (``rate`` req/s; 0 = all at t=0); results in prompt order.

    ``rate`` may be a list, one rate per request: the gap before request ``i + 1`` is drawn at
    ``rate[i]`` (a rising list makes a ramp from idle to saturation in one run).
    """
    from specdec.plan.vllm.stream import drive as stream_drive

    if model is None:
        model = await served_model(port)
    rates = rate if isinstance(rate, list) else [rate] * len(prompts)
    if len(rates) != len(prompts):
        raise ValueError(f"drive: {len(rates)} rates for {len(prompts)} prompts")
    rng = random.Random(seed)
    starts, t = [], 0.0
    for r in rates:
        starts.append(t)
        t += rng.expovariate(r) if r > 0 else 0.0
    bodies = [("/v1/completions", {"model": model, "prompt": p["prompt_token_ids"], "max_tokens": max_tokens,
                                   "temperature": 0.0, "ignore_eos": True, "stream": True, "return_token_ids": True,
                                   "stream_options": {"include_usage": True}}) for p in prompts]
    results = await asyncio.to_thread(stream_drive, _url(port), bodies, starts, timeout=timeout)
    return [{"index": p["index"], "ttft": r.ttft, "tpot": r.tpot, "tokens": r.tokens,
             "text": " ".join(map(str, r.token_ids)), "error": r.error, "sent": r.sent, "chunk_times": r.chunk_times}
            for p, r in zip(prompts, results)]


async def served_model(port: int) -> str:
    from specdec.plan.vllm.measure import served_model as model_of

    return await asyncio.to_thread(model_of, _url(port))


async def scrape_spec_metrics(port: int) -> dict:
    """vLLM's speculative-decoding counters (and specdec's steps, when present) from /metrics, summed over labels."""
    from specdec.plan.vllm.server_metrics import parse_prometheus, spec_counters
    from specdec.plan.vllm.stream import get

    _, text = await asyncio.to_thread(get, _url(port), "/metrics")
    c = spec_counters(text)
    out = {"draft_tokens": c.draft_tokens, "generation_tokens": c.generation_tokens, "accepted_tokens": c.accepted,
           "drafts": c.drafts}
    out.update({f"accepted_pos_{j}": v for j, v in enumerate(c.per_pos)})
    steps = sum(v for name, _, v in parse_prometheus(text) if name == "vllm:specdec_steps_total")
    if steps:
        out["specdec_steps"] = steps
    return out
