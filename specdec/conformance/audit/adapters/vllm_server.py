"""Adapter: a running vLLM OpenAI-compatible server, by URL (two servers: with and without speculation).

Requests go to ``POST {url}/v1/completions`` with the prompt as token ids, ``return_token_ids`` (the
generated ids come back as ids, nothing is re-tokenised), ``ignore_eos`` and the setting's vLLM
sampling fields (``top_k``, ``min_p``, ``repetition_penalty``, ``allowed_token_ids``, ``bad_words``,
``stop_token_ids``, ``seed``, ``n`` ...), several at a time. Acceptance comes from the speculative
server's ``/metrics`` (``vllm:spec_decode_num_draft_tokens_total`` and
``vllm:spec_decode_num_accepted_tokens_total`` before and after each setting): run the audit
alone against that server, or the counts include other traffic. A 400 answer is the server's
refusal (its message is kept); a connection failure or a 5xx is an error.

The servers must serve a checkpoint made by
:func:`~specdec.conformance.audit.fixtures.save_checkpoint` (bad tokens are its words ``t{i}``), and
the audit's law is computed from that same checkpoint in the auditing process.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from ..engine import EngineFailed, Job, Refused, Samples
from ..settings import Sampling

_COUNTERS = ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")


def request_body(model: str, prompt: Sequence[int], s: Sampling, seed: int | None) -> dict:
    """The completions request of one prompt under ``s``."""
    body = {"model": model, "prompt": list(prompt), "max_tokens": s.max_tokens, "temperature": s.temperature,
            "top_p": s.top_p, "min_p": s.min_p, "n": s.n, "repetition_penalty": s.repetition_penalty,
            "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty, "ignore_eos": True,
            "return_token_ids": True, "seed": seed}
    if s.top_k is not None:
        body["top_k"] = s.top_k
    if s.logit_bias:
        body["logit_bias"] = {str(t): b for t, b in s.logit_bias}
    if s.allowed_tokens is not None:
        body["allowed_token_ids"] = list(s.allowed_tokens)
    if s.bad_tokens:
        body["bad_words"] = [f"t{t}" for t in s.bad_tokens]
    if s.stop_tokens:
        body["stop_token_ids"] = list(s.stop_tokens)
    return body


class VLLMServerEngine:
    """Two vLLM servers of one checkpoint: ``url`` speculates (``method`` names how), ``plain_url`` does not.

    Args:
        url / plain_url: base URLs (``http://host:port``).
        model: the served model name (as in ``/v1/models``).
        method: the speculative method, for the report.
        concurrency: requests in flight at once.
    """

    name = "vllm-server"
    profile = "vllm"

    def __init__(self, url: str, plain_url: str, model: str, *, method: str = "speculative", concurrency: int = 64,
                 timeout: float = 600.0):
        if url.rstrip("/") == plain_url.rstrip("/"):
            raise ValueError("url and plain_url are the same server: the plain arm needs a server without speculation")
        self.url, self.plain_url = url.rstrip("/"), plain_url.rstrip("/")
        self.model, self.method, self.concurrency, self.timeout = model, method, concurrency, timeout

    def describe(self) -> dict:
        return {"engine": self.name, "method": self.method, "profile": self.profile, "url": self.url,
                "plain_url": self.plain_url, "model": self.model}

    def _post(self, base: str, body: dict) -> dict:
        req = urllib.request.Request(f"{base}/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    def _counters(self, base: str) -> tuple[float, float] | None:
        try:
            with urllib.request.urlopen(f"{base}/metrics", timeout=self.timeout) as resp:
                text = resp.read().decode()
        except (urllib.error.URLError, OSError):
            return None
        found = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            key = name.split("{")[0]
            if key in _COUNTERS:
                found[key] = found.get(key, 0.0) + float(value.split()[0])
        return (found[_COUNTERS[0]], found[_COUNTERS[1]]) if len(found) == 2 else None

    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        base = self.url if speculative else self.plain_url
        return [self._run(base, job, speculative) for job in jobs]

    def _run(self, base: str, job: Job, speculative: bool):
        calls = []
        per = [job.n // s.n for s in job.sampling]
        for r in range(max(per)):
            for i, (p, s) in enumerate(zip(job.prompts, job.sampling)):
                if r < per[i]:
                    seed = job.seed + len(calls) * s.n if s.seeded else None
                    calls.append((i, request_body(self.model, p, s, seed)))
        before = self._counters(base) if speculative else None
        outputs: list[list[list[int]]] = [[] for _ in job.prompts]
        try:
            with ThreadPoolExecutor(self.concurrency) as pool:
                answers = list(pool.map(lambda c: self._post(base, c[1]), calls))
        except urllib.error.HTTPError as exc:
            message = exc.read().decode(errors="replace")[:2000]
            return Refused(f"HTTP {exc.code}: {message}") if exc.code == 400 else EngineFailed(
                f"HTTP {exc.code}: {message}")
        except (urllib.error.URLError, OSError) as exc:
            return EngineFailed(f"{type(exc).__name__}: {exc}")
        for (i, _), ans in zip(calls, answers):
            outputs[i] += [list(choice["token_ids"]) for choice in ans["choices"]]
        after = self._counters(base) if speculative else None
        drafted = accepted = None
        if not speculative:
            drafted = accepted = 0
        elif before is not None and after is not None:
            drafted, accepted = int(after[0] - before[0]), int(after[1] - before[1])
        samples = Samples(outputs, drafted=drafted, accepted=accepted, requests=len(calls))
        samples.check(job)
        return samples
