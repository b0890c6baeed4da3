"""The pool file of ``specdec plan --engine vllm``: each pool's objectives, traffic, prompts and sampling.

Speculation is decided per pool, on that pool's own prompts and sampling. Format (TOML, paths
relative to the file; an optional ``[defaults]`` table is inherited by every pool)::

    [pools.interactive]
    share = 0.6                     # fraction of the fleet's requests; shares sum to 1
    objective = "latency"           # or "throughput"
    ttft_s = 2.0                    # objectives (seconds)
    tpot_s = 0.15
    rates = [0.25, 3.0]             # arrival rates to plan for (requests/s), low < high
    prompts = "prompts_dev.jsonl"   # Spec-Bench JSONL
    categories = ["extraction"]     # optional
    requests = 32                   # measured per candidate (WARMUP more sent first)
    api = "chat"                    # or "completions"
    [pools.interactive.sampling]    # temperature, top_p, top_k, max_tokens, seed, ignore_eos
    temperature = 0.0

Everything is checked, and prompts read, before any server starts; docs/deploying.md ("Segment")
gives the keys' ranges.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Sequence

from ...prompts import read_prompt_records
from ..toml_checks import check_number, read_tables

OBJECTIVES = {"latency": "goodput", "throughput": "good tokens/s"}  # each objective: what its score counts
APIS = ("chat", "completions")
POOL_KEYS = {"share", "objective", "ttft_s", "tpot_s", "rates", "prompts", "categories", "requests", "sampling",
             "api"}
SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_tokens", "seed", "ignore_eos"}
WARMUP = 2  # prompts of each pool kept out of the measured set, sent first to warm the server


@dataclasses.dataclass(frozen=True)
class Sampling:
    """A pool's sampling settings, sent with every request as the OpenAI-compatible API names them."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 64
    seed: int | None = None
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def body(self) -> dict[str, Any]:
        """The request fields for these settings (``top_k`` and ``seed`` only when set)."""
        out: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                               "ignore_eos": self.ignore_eos}
        if self.top_k > 0:
            out["top_k"] = self.top_k
        if self.seed is not None:
            out["seed"] = self.seed
        return out


@dataclasses.dataclass(frozen=True)
class VllmPool:
    """One pool, checked; ``prompts`` are the ``requests`` records measured, ``warmup`` the ones sent first."""

    name: str
    share: float
    objective: str
    ttft_s: float
    tpot_s: float
    rates: tuple[float, float]
    prompt_file: Path
    categories: tuple[str, ...] | None
    requests: int
    sampling: Sampling
    api: str
    prompts: tuple[dict, ...]
    warmup: tuple[dict, ...]

    @property
    def mix(self) -> dict[str, float]:
        """Share of each category among the measured prompts (what ``review`` compares)."""
        out: dict[str, float] = {}
        for r in self.prompts:
            out[r["category"]] = out.get(r["category"], 0.0) + 1.0 / len(self.prompts)
        return dict(sorted(out.items()))

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (what the plan and its review record keep)."""
        return {"name": self.name, "share": self.share, "objective": self.objective, "ttft_s": self.ttft_s,
                "tpot_s": self.tpot_s, "rates": list(self.rates), "prompts": str(self.prompt_file),
                "categories": None if self.categories is None else list(self.categories),
                "requests": self.requests, "sampling": dataclasses.asdict(self.sampling), "api": self.api,
                "mix": self.mix}


class PoolFileError(ValueError):
    """A pool file that cannot be planned; the message names the file, the pool and the key."""


_number = functools.partial(check_number, error=PoolFileError)


def _sampling(where: str, d) -> Sampling:
    if not isinstance(d, dict):
        raise PoolFileError(f"{where}.sampling must be a table, got {type(d).__name__}")
    unknown = set(d) - SAMPLING_KEYS
    if unknown:
        raise PoolFileError(f"{where}.sampling: unknown keys {sorted(unknown)}; allowed: {sorted(SAMPLING_KEYS)}")
    w = f"{where}.sampling"
    top_k = _number(w, "top_k", d.get("top_k", -1), integer=True, lo=-1)
    seed = d.get("seed")
    if seed is not None:
        _number(w, "seed", seed, integer=True, lo=0)
    ignore_eos = d.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise PoolFileError(f"{w}.ignore_eos must be true or false, got {ignore_eos!r}")
    return Sampling(float(_number(w, "temperature", d.get("temperature", 0.0), lo=0.0)),
                    float(_number(w, "top_p", d.get("top_p", 1.0), lo=0.0, strict=True, hi=1.0)),
                    int(top_k), int(_number(w, "max_tokens", d.get("max_tokens", 64), integer=True, lo=1)),
                    seed, ignore_eos)


def _pool(name: str, d: dict, base: Path) -> VllmPool:
    where = f"pools.{name}"
    unknown = set(d) - POOL_KEYS
    if unknown:
        raise PoolFileError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(POOL_KEYS)}")
    for key in ("share", "ttft_s", "tpot_s", "rates", "prompts"):
        if key not in d:
            raise PoolFileError(f"{where}: missing required key {key!r}")
    share = float(_number(where, "share", d["share"], lo=0.0, strict=True, hi=1.0))
    objective = d.get("objective", "latency")
    if objective not in OBJECTIVES:
        raise PoolFileError(f"{where}.objective must be one of {list(OBJECTIVES)}, got {objective!r}")
    api = d.get("api", "chat")
    if api not in APIS:
        raise PoolFileError(f"{where}.api must be one of {list(APIS)}, got {api!r}")
    ttft = float(_number(where, "ttft_s", d["ttft_s"], lo=0.0, strict=True))
    tpot = float(_number(where, "tpot_s", d["tpot_s"], lo=0.0, strict=True))
    rates = d["rates"]
    if not isinstance(rates, list) or len(rates) != 2:
        raise PoolFileError(f"{where}.rates must be [low, high] in requests/s, got {rates!r}")
    lo = float(_number(where, "rates[0]", rates[0], lo=0.0, strict=True))
    hi = float(_number(where, "rates[1]", rates[1], lo=0.0, strict=True))
    if hi <= lo:
        raise PoolFileError(f"{where}.rates must rise: low {lo} < high {hi}")
    requests = int(_number(where, "requests", d.get("requests", 32), integer=True, lo=1))
    cats = d.get("categories")
    if cats is not None and (not isinstance(cats, list) or not cats or not all(isinstance(c, str) for c in cats)):
        raise PoolFileError(f"{where}.categories must be a non-empty list of category names, got {cats!r}")
    if not isinstance(d["prompts"], str) or not d["prompts"]:
        raise PoolFileError(f"{where}.prompts must be the path of a Spec-Bench JSONL file, got {d['prompts']!r}")
    path = Path(d["prompts"])
    path = (path if path.is_absolute() else base / path).resolve()
    try:
        records = read_prompt_records(path, categories=cats)
    except ValueError as exc:
        raise PoolFileError(f"{where}.prompts: {exc}") from None
    if len(records) < requests + WARMUP:
        raise PoolFileError(f"{where}: {path} has {len(records)} prompts of categories {cats or 'any'}; the pool "
                            f"measures requests = {requests} plus {WARMUP} for warm-up: lower requests or add "
                            "prompts")
    chosen = _round_robin(records, requests + WARMUP)
    return VllmPool(name, share, objective, ttft, tpot, (lo, hi), path, None if cats is None else tuple(cats),
                    requests, _sampling(where, d.get("sampling", {})), api, tuple(chosen[WARMUP:]),
                    tuple(chosen[:WARMUP]))


def _round_robin(records: Sequence[dict], n: int) -> list[dict]:
    """``n`` records taken one category at a time in turn (file order within a category)."""
    by_cat: dict[str, list[dict]] = {}
    for r in records:
        by_cat.setdefault(r["category"], []).append(r)
    queues = [list(v) for v in by_cat.values()]
    out: list[dict] = []
    while len(out) < n:
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop(0))
    return out


def parse_pool_file(text: str, source: str | Path = "<string>", base: Path | None = None) -> dict[str, VllmPool]:
    """Parse and check a pool file's text (prompt files relative to ``base``); pools in file order.
    Raises :class:`PoolFileError` on the first problem, prefixed with ``source`` and naming the key."""
    base = Path(".") if base is None else base
    data = read_tables(text, source, {"pools", "defaults"}, "[defaults] and [pools.<name>] tables", PoolFileError)
    defaults = data.get("defaults", {})
    pools = data.get("pools")
    try:
        if not isinstance(defaults, dict):
            raise PoolFileError(f"defaults must be a table, got {type(defaults).__name__}")
        bad = set(defaults) - POOL_KEYS
        if bad:
            raise PoolFileError(f"defaults: unknown keys {sorted(bad)}; allowed: {sorted(POOL_KEYS)}")
        if not isinstance(pools, dict) or not pools:
            raise PoolFileError("no pools defined; add at least one [pools.<name>] table")
        out = {}
        for name, d in pools.items():
            if not isinstance(d, dict):
                raise PoolFileError(f"pools.{name} must be a table, got {type(d).__name__}")
            merged = {**defaults, **d}
            if isinstance(defaults.get("sampling"), dict) and isinstance(d.get("sampling"), dict):
                merged["sampling"] = {**defaults["sampling"], **d["sampling"]}
            out[name] = _pool(name, merged, base)
        total = sum(p.share for p in out.values())
        if abs(total - 1.0) > 1e-6:
            raise PoolFileError(f"the pools' shares sum to {total:g}, not 1: "
                                + ", ".join(f"{p.name} {p.share:g}" for p in out.values()))
    except PoolFileError as exc:
        raise PoolFileError(f"{source}: {exc}") from None
    return out


def pool_from_description(desc: dict) -> VllmPool:
    """A pool rebuilt from :meth:`VllmPool.describe` (a review record's copy), its prompts read again;
    :class:`PoolFileError` when incomplete or its prompt file is gone or changed."""
    d = {k: v for k, v in desc.items() if k in POOL_KEYS}
    if d.get("categories") is None:
        d.pop("categories", None)
    if isinstance(d.get("sampling"), dict):
        d["sampling"] = {k: v for k, v in d["sampling"].items() if v is not None}
    try:
        return _pool(str(desc.get("name", "?")), d, Path("."))
    except PoolFileError as exc:
        raise PoolFileError(f"the recorded pool {desc.get('name')!r} cannot be rebuilt: {exc}") from None


def load_pool_file(path: str | Path) -> dict[str, VllmPool]:
    """Read and check a pool file (see :func:`parse_pool_file`)."""
    path = Path(path)
    if not path.is_file():
        raise PoolFileError(f"pool file {path} does not exist")
    return parse_pool_file(path.read_text(), path, path.parent)
