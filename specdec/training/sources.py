"""Teacher-forcing sources for the feature cache: ShareGPT conversations and self-distilled answers.

Both become :class:`~.features.TeacherSequence` lists (token ids + which tokens are assistant text):

* ``sharegpt``: fixed conversations (Vicuna/Medusa/EAGLE's data) in the target's chat template,
  whole multi-turn, cut to ``max_len`` tokens, in file order (the file is already shuffled);
* ``selfdistill``: the target's own greedy answers to the prompt file (``specdec.training.data``),
  the prompt then the response; only the response counts as assistant text. The held-out records
  (every ``heldout_every``-th, as every trainer splits) are left out here, so features never
  contain the prompts acceptance is measured on.
"""

from __future__ import annotations

from typing import Sequence

from .features import TeacherSequence
from .loop import is_heldout
from .sharegpt import ShareGPTRead, encode_conversation, read_sharegpt


def sharegpt_sequences(tokenizer, max_len: int, path: str | None = None, limit: int | None = None,
                       max_tokens: int | None = None) -> tuple[list[TeacherSequence], ShareGPTRead]:
    """Encoded ShareGPT conversations and what was read (truncation, skips). ``max_tokens`` stops
    encoding once the sequences hold that many tokens (tokenizing all 17k takes minutes); the
    order is the file's, so a larger budget extends a smaller one."""
    read = read_sharegpt(path, limit=limit)
    seqs, total = [], 0
    for conv in read.conversations:
        if max_tokens is not None and total >= max_tokens:
            break
        ids, assistant = encode_conversation(tokenizer, conv["messages"], max_len)
        if any(assistant[1:]):
            seqs.append(TeacherSequence(ids, assistant))
            total += len(ids)
        else:  # the cut left no assistant token to learn from
            read.skipped["no assistant token within max_len"] = read.skipped.get(
                "no assistant token within max_len", 0) + 1
    return seqs, read


def selfdistill_sequences(records: Sequence[dict], max_len: int, heldout_every: int = 10
                          ) -> tuple[list[TeacherSequence], list[int]]:
    """``(sequences, used record indices)`` of the non-held-out self-distillation records.

    The prompt is cut from the left so the response keeps as much room as ``max_len`` allows.
    """
    seqs, used = [], []
    for i, rec in enumerate(records):
        if is_heldout(i, heldout_every):
            continue
        p, r = list(rec["prompt_ids"]), list(rec["response_ids"])
        if not p or not r:
            raise ValueError(f"self-distillation record {i} has an empty prompt or response")
        r = r[: max_len - 1]
        p = p[-(max_len - len(r)):]
        seqs.append(TeacherSequence(p + r, [False] * len(p) + [True] * len(r)))
        used.append(i)
    return seqs, used
