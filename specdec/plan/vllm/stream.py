"""The token stream of an OpenAI-compatible vLLM server, seen from a client: every chunk's time and tokens.

A continuous-batching server sends one chunk per running request per step, so chunk times are step
times seen from outside, and each chunk's ``return_token_ids`` count the tokens that step emitted.
Standard library only (``http.client`` in threads). A stream is complete only when it ends with
``data: [DONE]`` and its usage chunk agrees with the tokens counted; otherwise ``error`` is set
and it is never used as a measurement.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import http.client
import json
import socket
import threading
import time
import urllib.parse
from typing import Any, Sequence


@dataclasses.dataclass
class StreamResult:
    """One request as the client saw it (times on ``time.monotonic()``, one clock for all requests).

    ``chunk_times[i]`` is when the ``i``-th chunk that carried tokens arrived and
    ``chunk_tokens[i]`` how many it carried; ``token_ids`` are the output tokens in order.
    """

    index: int
    sent: float
    chunk_times: list[float] = dataclasses.field(default_factory=list)
    chunk_tokens: list[int] = dataclasses.field(default_factory=list)
    token_ids: list[int] = dataclasses.field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tokens(self) -> int:
        return len(self.token_ids)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.sent if self.chunk_times else None

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first (None for fewer than two tokens)."""
        if self.tokens < 2:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / (self.tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "StreamResult":
        return cls(**d)


class SSEAccumulator:
    """Builds a :class:`StreamResult` from Server-Sent Events lines, one :meth:`feed` per line.

    Understands vLLM's completions chunks (``choices[0].text``) and chat chunks
    (``choices[0].delta``), both with ``token_ids``; the usage chunk (empty ``choices``); an
    ``error`` object sent mid-stream; and ``data: [DONE]``.
    """

    def __init__(self, index: int, sent: float):
        self.result = StreamResult(index, sent)
        self.done = False

    def feed(self, line: str, now: float) -> None:
        r = self.result
        line = line.strip()
        if not line.startswith("data:") or r.error is not None:
            return  # blank separators, comments and event names carry nothing measured
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        if self.done:
            r.error = "data after [DONE]"
            return
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError:
            r.error = f"a chunk is not JSON: {payload[:120]!r}"
            return
        if not isinstance(chunk, dict):
            r.error = f"a chunk is not a JSON object: {payload[:120]!r}"
            return
        if "error" in chunk:
            err = chunk["error"]
            r.error = f"server error mid-stream: {err.get('message', err) if isinstance(err, dict) else err}"
            return
        usage = chunk.get("usage")
        if usage:
            r.prompt_tokens = int(usage.get("prompt_tokens", 0))
            r.completion_tokens = int(usage.get("completion_tokens", 0))
        for choice in chunk.get("choices") or []:
            ids = choice.get("token_ids")
            text = choice.get("text") or (choice.get("delta") or {}).get("content")
            if ids is None:
                if text:
                    r.error = ("the server streamed text without token_ids: it must be vLLM with "
                               "return_token_ids support")
                    return
                ids = []
            if ids:
                r.chunk_times.append(now)
                r.chunk_tokens.append(len(ids))
                r.token_ids.extend(int(t) for t in ids)
            if choice.get("prompt_token_ids"):
                r.prompt_tokens = len(choice["prompt_token_ids"])
            if choice.get("finish_reason"):
                r.finish_reason = choice["finish_reason"]

    def finish(self, cause: str | None = None) -> StreamResult:
        """The result, with ``error`` set when the stream did not complete (``cause``: why it ended)."""
        r = self.result
        if r.error is None and (cause is not None or not self.done):
            why = cause or "the stream ended without data: [DONE]"
            r.error = f"stream cut short after {r.tokens} tokens: {why}"
        elif r.error is None and r.completion_tokens is not None and r.completion_tokens != r.tokens:
            r.error = (f"usage says {r.completion_tokens} completion tokens but the chunks carried {r.tokens}: "
                       "chunks were lost")
        elif r.error is None and not r.chunk_times:
            r.error = "no token was streamed"
        return r


def _connection(url: str, timeout: float):
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"expected an http(s):// server URL, got {url!r}")
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    return cls(u.hostname, u.port, timeout=timeout), u.path.rstrip("/")


def get(url: str, path: str, timeout: float = 10.0) -> tuple[int, str]:
    """``(status, body text)`` of ``GET url + path``; connection errors raise ``OSError``."""
    conn, prefix = _connection(url, timeout)
    try:
        conn.request("GET", prefix + path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    except http.client.HTTPException as exc:
        raise OSError(f"GET {url}{path}: {type(exc).__name__}: {exc}") from None
    finally:
        conn.close()


def stream_request(url: str, path: str, body: dict, *, index: int, timeout: float) -> StreamResult:
    """POST one streamed request and read its events until ``[DONE]`` or failure (never raises for
    a failed request: the result carries the error)."""
    deadline = time.monotonic() + timeout
    conn, prefix = _connection(url, timeout)
    sent = time.monotonic()
    acc = SSEAccumulator(index, sent)
    try:
        conn.request("POST", prefix + path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            acc.result.error = f"HTTP {resp.status}: {resp.read().decode('utf-8', 'replace')[:300]}"
            return acc.result
        while True:
            raw = resp.readline()
            if not raw:
                break
            now = time.monotonic()
            acc.feed(raw.decode("utf-8", "replace"), now)
            if acc.done or acc.result.error is not None:
                break
            if now > deadline:
                return acc.finish(f"request timeout of {timeout:g} s")
    except (OSError, http.client.HTTPException, socket.timeout) as exc:
        return acc.finish(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()
    return acc.finish()


def request_body(api: str, model: str, record: dict, sampling_fields: dict) -> tuple[str, dict]:
    """``(path, body)`` of one pool request: the record's first turn, streamed with token ids and usage."""
    body: dict[str, Any] = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                            "return_token_ids": True, **sampling_fields}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": record["turns"][0]}]
        return "/v1/chat/completions", body
    if api == "completions":
        body["prompt"] = record["turns"][0]
        return "/v1/completions", body
    raise ValueError(f"api must be 'chat' or 'completions', got {api!r}")


def drive(url: str, requests: Sequence[tuple[str, dict]], arrivals: Sequence[float], *, timeout: float,
          stop: threading.Event | None = None) -> list[StreamResult]:
    """Send ``requests[i]`` (``(path, body)``) at ``arrivals[i]`` seconds after the start, concurrently;
    results in request order. ``stop`` set (a dead server): requests not yet sent are not sent and
    come back with an error saying so."""
    if len(requests) != len(arrivals):
        raise ValueError(f"drive: {len(requests)} requests for {len(arrivals)} arrival times")
    if any(b < a for a, b in zip(arrivals[:-1], arrivals[1:])) or (arrivals and arrivals[0] < 0):
        raise ValueError("arrival times must be >= 0 and non-decreasing")
    futures: list[concurrent.futures.Future] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(len(requests), 256))) as pool:
        t0 = time.monotonic()
        for i, ((path, body), at) in enumerate(zip(requests, arrivals)):
            wait = t0 + at - time.monotonic()
            if stop is not None and stop.wait(max(0.0, wait)):
                break
            if stop is None and wait > 0:
                time.sleep(wait)
            futures.append(pool.submit(stream_request, url, path, body, index=i, timeout=timeout))
        results = [f.result() for f in futures]
    for i in range(len(results), len(requests)):
        results.append(StreamResult(i, time.monotonic(), error="not sent: the measurement was stopped"))
    return results
