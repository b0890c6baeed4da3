"""Checks shared by the planner's two TOML files (:mod:`.pools` and :mod:`.vllm.pool_spec`): errors name the file,
the table and the key, raised as the caller's ``error`` type."""

from __future__ import annotations

import math
import tomllib


def read_tables(text: str, source, keys: set, expected: str, error: type[Exception] = ValueError) -> dict:
    """``text`` parsed as TOML; ``error`` prefixed with ``source`` when it is not TOML or holds a top-level key
    outside ``keys`` (the message then says it ``expected`` ...)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{source}: not valid TOML: {exc}") from None
    unknown = set(data) - keys
    if unknown:
        raise error(f"{source}: unknown top-level keys {sorted(unknown)}; expected {expected}")
    return data


def check_number(where: str, key: str, value, *, integer: bool = False, lo: float | None = None,
                 strict: bool = False, hi: float | None = None, finite: bool = True,
                 error: type[Exception] = ValueError):
    """``value`` when it is an int (``integer``) or a number, not a bool, finite (non-integers, when ``finite``),
    ``>= lo`` (``> lo`` when ``strict``) and ``<= hi``; else ``error`` naming ``where.key``."""
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        raise error(f"{where}.{key} must be {'an integer' if integer else 'a number'}, got {value!r}")
    if finite and not integer and not math.isfinite(value):
        raise error(f"{where}.{key} must be finite, got {value!r}")
    if lo is not None and (value <= lo if strict else value < lo):
        raise error(f"{where}.{key} must be {'>' if strict else '>='} {lo}, got {value!r}")
    if hi is not None and value > hi:
        raise error(f"{where}.{key} must be <= {hi}, got {value!r}")
    return value
