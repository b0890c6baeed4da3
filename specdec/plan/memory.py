"""Memory accounting: how many sequences fit, with and without a proposer (a drafter's weights and KV
come out of the KV budget, lowering admitted concurrency). Bytes throughout; ``KV bytes per token =
2 x layers x kv_heads x head_dim x dtype bytes``.
"""

from __future__ import annotations

import dataclasses
import math

_DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float64": 8,
    "int8": 1,
    "float8_e4m3fn": 1,
}


def dtype_bytes(dtype) -> int:
    """Bytes per element of a torch dtype or dtype name ("float16", "torch.bfloat16", ...)."""
    name = str(dtype).replace("torch.", "")
    if name not in _DTYPE_BYTES:
        raise ValueError(f"unknown KV dtype {dtype!r}; expected one of {sorted(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[name]


def kv_bytes_per_token(config, dtype="float32") -> int:
    """KV bytes per token of a HF ``config`` (``num_key_value_heads`` else ``num_attention_heads``,
    ``head_dim`` else ``hidden_size / heads``; GPT-2 names accepted)."""
    get = (lambda k: config.get(k)) if isinstance(config, dict) else (lambda k: getattr(config, k, None))
    layers = get("num_hidden_layers") or get("n_layer")
    heads = get("num_attention_heads") or get("n_head")
    hidden = get("hidden_size") or get("n_embd")
    kv_heads = get("num_key_value_heads") or heads
    head_dim = get("head_dim") or (hidden // heads if hidden and heads else None)
    missing = [
        n
        for n, v in (
            ("num_hidden_layers", layers),
            ("num_attention_heads", heads),
            ("head_dim or hidden_size", head_dim),
        )
        if not v
    ]
    if missing:
        raise ValueError(f"model config lacks {missing}: cannot compute KV bytes per token")
    return int(2 * layers * kv_heads * head_dim * dtype_bytes(dtype))


@dataclasses.dataclass(frozen=True)
class ProposerMemory:
    """Fixed bytes (weights, shared tables) + bytes per cached token per request."""

    fixed_bytes: int = 0
    bytes_per_token: float = 0.0

    def __post_init__(self):
        if self.fixed_bytes < 0 or self.bytes_per_token < 0:
            raise ValueError(f"ProposerMemory values must be >= 0, got {self}")


@dataclasses.dataclass(frozen=True)
class Admission:
    """Result of :func:`admitted_concurrency`: sequences that fit and where the memory went."""

    sequences: int
    kv_tokens: int
    budget_bytes: int
    weights_bytes: int
    proposer_fixed_bytes: int
    bytes_per_sequence: float


def admitted_concurrency(
    budget_bytes: int,
    *,
    weights_bytes: int,
    kv_bytes_token: int,
    tokens_per_seq: float,
    proposer: ProposerMemory | None = None,
    draft_budget: int = 0,
) -> Admission:
    """Concurrent sequences of ``tokens_per_seq`` tokens fitting in ``budget_bytes`` after weights and
    the proposer's fixed memory: each needs ``(tokens_per_seq + draft_budget) x kv_bytes_token`` plus
    ``tokens_per_seq x proposer.bytes_per_token``."""
    for name, v in (
        ("budget_bytes", budget_bytes),
        ("weights_bytes", weights_bytes),
        ("kv_bytes_token", kv_bytes_token),
        ("tokens_per_seq", tokens_per_seq),
        ("draft_budget", draft_budget),
    ):
        if v is None or (isinstance(v, float) and math.isnan(v)) or v < 0:
            raise ValueError(f"admitted_concurrency: {name} must be >= 0, got {v}")
    if kv_bytes_token == 0:
        raise ValueError("admitted_concurrency: kv_bytes_token must be > 0")
    pm = proposer or ProposerMemory()
    free = budget_bytes - weights_bytes - pm.fixed_bytes
    per_seq = (tokens_per_seq + draft_budget) * kv_bytes_token + tokens_per_seq * pm.bytes_per_token
    seqs = int(max(0, free) // per_seq) if per_seq > 0 else 0
    return Admission(
        seqs, int(max(0, free) // kv_bytes_token), int(budget_bytes), int(weights_bytes), pm.fixed_bytes, per_seq
    )
