"""What a vLLM server says about itself on ``/metrics``: speculative counters and its KV cache.

vLLM 0.32's names: ``vllm:spec_decode_num_drafts_total`` (row-steps with a draft),
``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total``,
``..._num_accepted_tokens_per_pos_total{position="j"}`` (one series per draft position: their
number is the server's K), ``vllm:generation_tokens_total``, ``vllm:num_preemptions_total`` and
the info gauge ``vllm:cache_config_info`` (``num_gpu_blocks``, ``block_size``,
``kv_cache_memory_bytes``). A server without speculation exports no ``spec_decode`` series.
Counters are summed over every other label.
"""

from __future__ import annotations

import dataclasses
import math
import re

SPEC = {"vllm:spec_decode_num_drafts_total": "drafts",
        "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
        "vllm:spec_decode_num_accepted_tokens_total": "accepted",
        "vllm:generation_tokens_total": "generation_tokens",
        "vllm:num_preemptions_total": "preemptions"}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
CACHE_INFO = "vllm:cache_config_info"
_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MetricsError(ValueError):
    """``/metrics`` text that is not what a vLLM server exports."""


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """``(name, labels, value)`` for every sample line of Prometheus text exposition (comments skipped).

    Raises:
        MetricsError: a sample line that does not parse, naming its line number.
    """
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise MetricsError(f"/metrics line {lineno} is not a Prometheus sample: {line[:120]!r}")
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m.group(3) or "")}
        try:
            value = float(m.group(4))
        except ValueError:
            raise MetricsError(f"/metrics line {lineno}: value {m.group(4)!r} is not a number") from None
        out.append((m.group(1), labels, value))
    return out


@dataclasses.dataclass(frozen=True)
class SpecCounters:
    """vLLM's speculative counters at one moment (or the difference of two: :meth:`minus`); ``per_pos[j]``:
    row-steps that accepted position ``j``, one entry per draft position (none: ``speculating`` False)."""

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: tuple[float, ...] = ()
    generation_tokens: float = 0.0
    preemptions: float = 0.0
    speculating: bool = False

    def minus(self, before: "SpecCounters") -> "SpecCounters":
        """The counts between ``before`` and this reading (a server restarted in between is refused)."""
        if len(before.per_pos) != len(self.per_pos) or before.speculating != self.speculating:
            raise MetricsError("the two /metrics readings come from differently configured servers "
                               f"({len(before.per_pos)} vs {len(self.per_pos)} draft positions)")
        d = SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                         self.accepted - before.accepted,
                         tuple(a - b for a, b in zip(self.per_pos, before.per_pos)),
                         self.generation_tokens - before.generation_tokens, self.preemptions - before.preemptions,
                         self.speculating)
        if min((d.drafts, d.draft_tokens, d.accepted, d.generation_tokens, *d.per_pos), default=0.0) < 0:
            raise MetricsError("a counter went down between two /metrics readings: the server restarted")
        return d


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """The KV cache a server allocated; ``kv_cache_memory_bytes`` is its fixed KV budget, None when the
    engine sized the cache from free memory."""

    num_blocks: int
    block_size: int
    kv_cache_memory_bytes: int | None = None
    max_concurrency: float | None = None

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def spec_counters(text: str) -> SpecCounters:
    """The speculative counters in ``/metrics`` text, summed over engines and models."""
    sums = {v: 0.0 for v in SPEC.values()}
    per_pos: dict[int, float] = {}
    speculating = False
    for name, labels, value in parse_prometheus(text):
        if name in SPEC:
            sums[SPEC[name]] += value
            speculating |= name.startswith("vllm:spec_decode")
        elif name == PER_POS:
            if "position" not in labels:
                raise MetricsError(f"{PER_POS} sample without a position label: {labels}")
            pos = int(labels["position"])
            per_pos[pos] = per_pos.get(pos, 0.0) + value
            speculating = True
    if per_pos and sorted(per_pos) != list(range(len(per_pos))):
        raise MetricsError(f"{PER_POS} has positions {sorted(per_pos)}, expected 0..{len(per_pos) - 1}")
    return SpecCounters(sums["drafts"], sums["draft_tokens"], sums["accepted"],
                        tuple(per_pos[j] for j in range(len(per_pos))), sums["generation_tokens"],
                        sums["preemptions"], speculating)


def cache_info(text: str) -> CacheInfo:
    """The server's KV cache from ``vllm:cache_config_info`` (the first engine's). MetricsError when the
    gauge is missing or its ``num_gpu_blocks`` / ``block_size`` are not positive integers."""
    for name, labels, _ in parse_prometheus(text):
        if name != CACHE_INFO:
            continue
        try:
            blocks, size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
        except (KeyError, ValueError):
            raise MetricsError(f"{CACHE_INFO} lacks integer num_gpu_blocks / block_size labels: "
                               f"{ {k: labels.get(k) for k in ('num_gpu_blocks', 'block_size')} }") from None
        if blocks < 1 or size < 1:
            raise MetricsError(f"{CACHE_INFO}: num_gpu_blocks={blocks}, block_size={size} must be >= 1")
        mem = labels.get("kv_cache_memory_bytes", "None")
        conc = labels.get("kv_cache_max_concurrency", "None")
        return CacheInfo(blocks, size, None if mem in ("None", "") else int(mem),
                         None if conc in ("None", "") or not math.isfinite(float(conc)) else float(conc))
    raise MetricsError(f"no {CACHE_INFO} in /metrics: is this a vLLM server that has finished starting?")
