"""What a drafter's memory costs a vLLM server: KV blocks, and with them the requests it admits at once.

Measured from ``vllm:cache_config_info`` (``num_gpu_blocks`` x ``block_size`` tokens): a draft
model's or heads' layers take KV in the same blocks and, when the cache is sized from free memory,
their weights come off it; lookup drafters hold neither. Admitted concurrency: requests of the
pool's mean length (prompt + output + lookahead slots) the blocks hold, capped by ``max_num_seqs``.
Predicted from both ``config.json`` files (KV bytes per token: 2 x layers x KV heads x head dim x
dtype bytes) and the draft's weights: a fixed budget is shared by target and draft layers, a
free-memory cache loses the draft's weights first.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..memory import dtype_bytes, kv_bytes_per_token
from .server_metrics import CacheInfo


def admitted(cache: CacheInfo, tokens_per_request: float, lookahead: int = 0, max_num_seqs: int | None = None) -> int:
    """Requests of ``tokens_per_request`` tokens (+ ``lookahead`` draft slots) the cache holds at once."""
    if tokens_per_request <= 0:
        raise ValueError(f"tokens_per_request must be > 0, got {tokens_per_request}")
    blocks_each = math.ceil((tokens_per_request + lookahead) / cache.block_size)
    n = cache.num_blocks // blocks_each
    return n if max_num_seqs is None else min(n, max_num_seqs)


def read_config(folder: str | Path) -> dict | None:
    """A model folder's ``config.json`` (None when the folder is not local or has none)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None


def weight_bytes(folder: str | Path) -> int:
    """Bytes of a model folder's weight files (safetensors, else PyTorch bins)."""
    folder = Path(folder)
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def element_bytes(target_config: dict, dtype: str | None) -> int:
    """Bytes per KV element: the served ``--dtype`` when given (not "auto"), else the config's dtype."""
    name = dtype if dtype not in (None, "auto") else (target_config.get("torch_dtype") or target_config.get("dtype"))
    if name is None:
        raise ValueError("cannot tell the KV dtype: give --dtype in the serve command or torch_dtype in config.json")
    return dtype_bytes(name)


def draft_kv_bytes_per_token(draft_config: dict, elem: int) -> int:
    """KV bytes per token of a draft model's or head's attention layers."""
    return kv_bytes_per_token(draft_config, "float32") // 4 * elem


def predict_blocks(off: CacheInfo, target_config: dict, draft_config: dict | None, draft_weights: int, *,
                   dtype: str | None) -> int:
    """The KV blocks the server would allocate with the draft (module docstring); the off server's for
    a lookup drafter (``draft_config`` None and no weights)."""
    if draft_config is None and draft_weights == 0:
        return off.num_blocks
    elem = element_bytes(target_config, dtype)
    target = kv_bytes_per_token(target_config, "float32") // 4 * elem
    draft = 0 if draft_config is None else draft_kv_bytes_per_token(draft_config, elem)
    per_block = off.block_size * (target + draft)
    if off.kv_cache_memory_bytes is not None:
        return int(off.kv_cache_memory_bytes // per_block)
    free = off.num_blocks * off.block_size * target - draft_weights
    return max(0, int(free // per_block))
