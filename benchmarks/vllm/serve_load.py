"""A bounded open-loop load generator for an OpenAI-compatible server on loopback, and its /metrics reader.

``drive`` sends each prompt (token ids) as a streamed greedy ``/v1/completions`` request at
Poisson arrival times of ``rate`` per second (0: all at once), seeded, every request with a
timeout; it returns per request the time to first token, the time per output token after the
first (``(t_last - t_first) / (tokens - 1)``, tokens from the final usage chunk), the arrival time
of every text chunk (``time.monotonic()``, one clock for all requests: the engine streams one
chunk per request per step), the text and any error. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time


def percentile(values, q: float):
    """The q-th percentile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


async def _one(session, port: int, prompt: dict, max_tokens: int, timeout: float) -> dict:
    import aiohttp

    body = {"model": prompt.get("model", ""), "prompt": prompt["prompt_token_ids"], "max_tokens": max_tokens,
            "temperature": 0.0, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    out = {"index": prompt["index"], "ttft": None, "tpot": None, "tokens": 0, "text": "", "error": None, "sent": t0}
    first = last = None
    parts, times = [], []
    try:
        async with session.post(f"http://127.0.0.1:{port}/v1/completions", json=body,
                                timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                out["error"] = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return out
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                if chunk.get("usage"):
                    out["tokens"] = int(chunk["usage"]["completion_tokens"])
                for choice in chunk.get("choices", []):
                    if choice.get("text"):
                        now = time.monotonic()
                        first = now if first is None else first
                        last = now
                        parts.append(choice["text"])
                        times.append(now)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    if first is None:
        out["error"] = "no token streamed"
        return out
    out["ttft"] = first - t0
    out["tpot"] = (last - first) / (out["tokens"] - 1) if out["tokens"] > 1 else None
    out["text"] = "".join(parts)
    out["chunk_times"] = times
    return out


async def drive(port: int, prompts: list[dict], *, rate: float | list[float], max_tokens: int, timeout: float,
                seed: int, model: str | None = None) -> list[dict]:
    """Send every prompt once at Poisson times (``rate`` req/s; 0 = all at t=0); results in prompt order.

    ``rate`` may be a list, one rate per request: the gap before request ``i + 1`` is drawn at
    ``rate[i]`` (a rising list makes a ramp from idle to saturation in one run).
    """
    import aiohttp

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
    async with aiohttp.ClientSession() as session:
        t0 = time.monotonic()

        async def launch(at: float, prompt: dict):
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
            return await _one(session, port, dict(prompt, model=model), max_tokens, timeout)

        return list(await asyncio.gather(*(launch(at, p) for at, p in zip(starts, prompts))))


async def served_model(port: int) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/v1/models") as r:
            data = await r.json()
    return data["data"][0]["id"]


async def scrape_spec_metrics(port: int) -> dict:
    """vLLM's speculative-decoding counters (and specdec's, when present) from /metrics, summed over labels."""
    import aiohttp

    names = {"vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
             "vllm:generation_tokens_total": "generation_tokens",
             "vllm:spec_decode_num_accepted_tokens_total": "accepted_tokens",
             "vllm:spec_decode_num_drafts_total": "drafts",
             "vllm:specdec_steps_total": "specdec_steps"}
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            pos = line.split('position="', 1)[1].split('"', 1)[0]
            key = f"accepted_pos_{int(pos)}"
            out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        elif name in names:
            out[names[name]] = out.get(names[name], 0.0) + float(line.rsplit(" ", 1)[1])
    return out
