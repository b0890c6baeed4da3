"""Prompt token-id files: prompts carried as token ids, so no dataset package or text pass is needed
where they are used (the GPU machine has neither network nor the ShareGPT package).

Format (``numpy.savez_compressed``): ``ids`` (uint16 when every id fits, else int32, all prompts
concatenated), ``offsets [n + 1]`` (int64) and ``meta`` (JSON bytes: ``format``, the source, the
tokenizer fingerprint, the prompt count and what was skipped). :func:`sharegpt_first_turns` makes
the prompts a self-distillation run answers: each ShareGPT conversation's first user turn, encoded as
the dev prompts are (:func:`specdec.prompts.chat_ids`: the chat template with the assistant header
appended). Prompts longer than ``max_prompt_tokens`` are skipped, not cut: a cut
prompt loses its template's header or its question.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

FORMAT = "specdec-prompt-ids-1"


def write_prompt_ids(path: str | Path, prompts: Sequence[Sequence[int]], meta: dict) -> dict:
    """Write ``prompts`` to ``path`` (a ``.npz``); returns the meta written (with ``format``, ``prompts``,
    ``tokens``).

    Raises:
        ValueError: no prompts, an empty prompt, or a negative id.
    """
    import numpy as np

    if not prompts:
        raise ValueError("write_prompt_ids needs at least one prompt")
    lens = [len(p) for p in prompts]
    if min(lens) == 0:
        raise ValueError(f"prompt {lens.index(0)} is empty")
    flat = np.fromiter((int(t) for p in prompts for t in p), dtype=np.int64, count=sum(lens))
    if flat.min() < 0:
        raise ValueError("token ids must be >= 0")
    ids = flat.astype(np.uint16 if flat.max() < 2 ** 16 else np.int32)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    meta = {**meta, "format": FORMAT, "prompts": len(prompts), "tokens": int(offsets[-1])}
    with open(path, "wb") as f:  # a file object: savez would append .npz to a name without it
        np.savez_compressed(f, ids=ids, offsets=offsets, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    return meta


def read_prompt_ids(path: str | Path) -> tuple[list[list[int]], dict]:
    """``(prompts, meta)`` from a file :func:`write_prompt_ids` wrote.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a prompt-id file (format, missing arrays, offsets that do not fit the ids).
    """
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prompt-id file {path}: no such file")
    try:
        with np.load(path) as z:
            ids, offsets, meta = z["ids"], z["offsets"], json.loads(bytes(z["meta"]).decode())
    except (KeyError, ValueError, OSError) as exc:
        raise ValueError(f"{path} is not a prompt-id file ({exc})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != ids.size or (np.diff(offsets) <= 0).any():
        raise ValueError(f"{path}: offsets do not partition its {ids.size} ids into non-empty prompts")
    flat = ids.astype(np.int64).tolist()
    return [flat[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())], meta


def sharegpt_first_turns(tokenizer, max_prompt_tokens: int, path: str | Path | None = None,
                         limit: int | None = None) -> tuple[list[list[int]], dict]:
    """``(prompts, report)``: the opening of every ShareGPT conversation as a prompt (see the module
    docstring), in file order; ``report`` counts what was read, kept and skipped."""
    from ..prompts import chat_ids
    from .sharegpt import read_sharegpt

    if max_prompt_tokens < 1:
        raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
    read = read_sharegpt(path, limit=limit)
    prompts, too_long, no_user = [], 0, 0
    for conv in read.conversations:
        first = next((m["content"] for m in conv["messages"] if m["role"] == "user"), None)
        if first is None:
            no_user += 1
            continue
        ids = chat_ids(tokenizer, first)
        if len(ids) > max_prompt_tokens:
            too_long += 1
            continue
        prompts.append(ids)
    report = {"source": "sharegpt first turns", "read": read.summary(), "conversations": len(read.conversations),
              "kept": len(prompts), "skipped_too_long": too_long, "skipped_no_user_turn": no_user,
              "max_prompt_tokens": max_prompt_tokens}
    return prompts, report
