"""The review record a vLLM plan leaves behind (``review.json``), and the fingerprints it holds.

It keeps what each pool's decision rested on, so ``specdec review --engine vllm`` can tell what
moved: the target's, tokenizer's and each draft artifact's fingerprints (from their files, without
loading them), the vLLM version, per pool the chosen configuration, its measured acceptance, the
traffic mix, what the artifact is bound to and off's decode-step time at each batch size (how fast
the engine ran: the hardware, the serve command and vLLM all set it), and the thresholds. A model
given by name cannot be fingerprinted: the record holds ``fingerprint: null``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from pathlib import Path
from typing import Any, Mapping

KIND = "specdec.vllm-review"
FORMAT = 1
_SAMPLE = 1 << 16
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                    "special_tokens_map.json")


def _safetensors_header(path: Path) -> bytes:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            return b""
        (n,) = struct.unpack("<Q", raw)
        return f.read(min(n, 1 << 24))


def _sampled(path: Path) -> bytes:
    """Bytes at the start, middle and end of a file (a changed checkpoint changes them)."""
    size = path.stat().st_size
    out = []
    with open(path, "rb") as f:
        for at in sorted({0, max(0, size // 2 - _SAMPLE // 2), max(0, size - _SAMPLE)}):
            f.seek(at)
            out.append(f.read(_SAMPLE))
    return b"".join(out)


def model_fingerprint(folder: str | Path | None) -> str | None:
    """``files:<hex>`` of a local model folder (module docstring); None when it is not a local folder."""
    if folder is None:
        return None
    folder = Path(folder)
    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    cfg = folder / "config.json"
    h.update(cfg.read_bytes() if cfg.is_file() else b"no config")
    weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    for w in weights:
        h.update(w.name.encode() + b"\0" + str(w.stat().st_size).encode())
        h.update(_safetensors_header(w) if w.suffix == ".safetensors" else b"")
        h.update(_sampled(w))
    return "files:" + h.hexdigest()[:20]


def tokenizer_fingerprint(folder: str | Path | None) -> str | None:
    """``tok:<hex>`` of a local folder's tokenizer files (None: not local, or no tokenizer file)."""
    if folder is None or not Path(folder).is_dir():
        return None
    h = hashlib.sha256()
    found = False
    for name in _TOKENIZER_FILES:
        p = Path(folder) / name
        if p.is_file():
            found = True
            h.update(name.encode() + b"\0" + p.read_bytes())
    return "tok:" + h.hexdigest()[:20] if found else None


@dataclasses.dataclass(frozen=True)
class PoolRecord:
    """What one pool's decision rested on."""

    config: dict | None
    candidate: str
    bound_to: str
    artifact: str | None
    artifact_fingerprint: str | None
    accepted_per_draft: float
    accepted_per_row_step: float
    mix: dict[str, float]
    pool: dict[str, Any]
    sentence: str
    off_steps: dict[str, float] | None = None  # off's median decode step (s) by running requests, as planned
    overload_floor: float = 0.0  # the loss at an overload the plan could tell from noise and drift (.drift)


def make_record(*, vllm_version: str, target: str | None, pools: Mapping[str, PoolRecord], thresholds: Mapping,
                engine: Mapping, serve: str | None, servers: Mapping[str, str] | None) -> dict:
    """The record (module docstring) as a JSON-ready dict."""
    return {"kind": KIND, "format": FORMAT, "vllm_version": vllm_version,
            "target": {"model": target, "fingerprint": model_fingerprint(target),
                       "tokenizer": tokenizer_fingerprint(target)},
            "serve": serve, "servers": dict(servers or {}), "engine": dict(engine), "thresholds": dict(thresholds),
            "pools": {name: dataclasses.asdict(p) for name, p in pools.items()}}


def load_record(path: str | Path) -> dict:
    """Read ``review.json`` (or the plan folder holding it) and check its shape; ValueError naming what is
    missing or wrong."""
    path = Path(path)
    if path.is_dir():
        path = path / "review.json"
    if not path.is_file():
        raise ValueError(f"no review record at {path}: run `specdec plan --engine vllm` first (it writes review.json)")
    try:
        rec = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(rec, dict) or rec.get("kind") != KIND:
        raise ValueError(f"{path} is not a vLLM plan's review record (kind {KIND!r}); for a specdec-engine plan use "
                         "`specdec review` without --engine vllm")
    missing = {"vllm_version", "target", "pools", "thresholds", "engine"} - set(rec)
    if missing:
        raise ValueError(f"{path} lacks {sorted(missing)}")
    for name, p in rec["pools"].items():
        lacking = {f.name for f in dataclasses.fields(PoolRecord) if f.default is dataclasses.MISSING} - set(p)
        if lacking:
            raise ValueError(f"{path}: pool {name!r} lacks {sorted(lacking)}")
    return rec
