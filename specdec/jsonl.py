"""Reading JSON Lines files with errors that name the file and line, in one place.

Prompt files, response logs for warming the suffix cache and the self-distillation caches are
all JSONL; each reader adds its own field checks on top of :func:`read_jsonl`.
"""

from __future__ import annotations

import json
from pathlib import Path


def read_jsonl(path: str | Path, what: str = "JSONL file") -> list[tuple[int, object]]:
    """``(line number, value)`` for every non-empty line, numbered from 1.

    Raises:
        ValueError: ``cannot read <what> <path>`` when the file cannot be opened, or
            ``<path>:<line>: not valid JSON`` for a line that does not parse.
    """
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read {what} {str(path)!r}: {exc}") from exc
    out = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({exc})") from exc
    return out
