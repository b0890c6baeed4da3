"""Spec-Bench-format prompt files: reading, selecting and tokenizing them, in one place.

One JSONL object a line with ``category``, ``turns`` (user messages) and usually ``question_id``; the
first turn goes through the chat template. :func:`read_jsonl` also reads response logs and
self-distillation caches, with errors naming file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence



def read_jsonl(path: str | Path, what: str = "JSONL file") -> list[tuple[int, object]]:
    """``(line number from 1, value)`` per non-empty line; ValueError ``cannot read <what> <path>`` or
    ``<path>:<line>: not valid JSON``."""
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


def read_prompt_records(path: str | Path, *, categories: Sequence[str] | None = None,
                        per_category: int | None = None, limit: int | None = None) -> list[dict]:
    """Records of a Spec-Bench JSONL file in file order, filtered by ``categories`` (each must occur),
    ``per_category`` and ``limit``. ValueError for a missing file, a bad line (not JSON, no
    ``category`` or non-empty ``turns``), an unknown category, or nothing selected."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"prompt file {path} does not exist")
    out: list[dict] = []
    taken: dict[str, int] = {}
    known: set[str] = set()
    for lineno, rec in read_jsonl(path, "prompt file"):
        if (
            not isinstance(rec, dict)
            or "category" not in rec
            or not isinstance(rec.get("turns"), list)
            or not rec["turns"]
        ):
            raise ValueError(f"{path}:{lineno}: expected an object with 'category' and a non-empty 'turns' list")
        cat = rec["category"]
        known.add(cat)
        if categories and cat not in categories:
            continue
        if per_category is not None and taken.get(cat, 0) >= per_category:
            continue
        if limit is not None and len(out) >= limit:
            continue
        taken[cat] = taken.get(cat, 0) + 1
        out.append(rec)
    if categories:
        unknown = sorted(set(categories) - known)
        if unknown:
            raise ValueError(f"unknown categories {unknown}; {path} has {sorted(known)}")
    if not out:
        raise ValueError(f"no prompts selected from {path} (categories={categories}, per_category={per_category})")
    return out


def chat_ids(tokenizer, text: str) -> list[int]:
    """Token ids of one user message, through the tokenizer's chat template when it has one."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if hasattr(ids, "keys"):  # some tokenizers return a BatchEncoding
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    return [int(t) for t in tokenizer(text)["input_ids"]]


def encode_first_turn(tokenizer, record: dict) -> list[int]:
    """Token ids of a record's first user turn (see :func:`chat_ids`)."""
    return chat_ids(tokenizer, record["turns"][0])
