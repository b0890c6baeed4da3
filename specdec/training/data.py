"""Self-distillation data: the target's own greedy responses to prompts, and its hidden states.

Drafters learn what this target emits, so the data is its own output, cached per target fingerprint
as ``<cache_dir>/selfdistill-<target fp>-<n>x<max_new>.``: ``.jsonl`` (``question_id``, ``category``,
``prompt_ids``, ``response_ids`` per prompt) and ``.safetensors`` (``hidden [N, H]`` float16 post-norm
states at the last prompt position and every response position, ``tokens [N]`` at the same positions,
``record [N]``; row ``t``'s LM-head logits predict row ``t + 1``'s token).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..models import clean_generate
from ..prompts import read_jsonl
from ..prompts import encode_first_turn

DEFAULT_CACHE_DIR = os.path.join("benchmarks", "data")


@torch.inference_mode()
def greedy_responses(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos_token_id: int | None,
                     batch_size: int = 8, progress: Callable[[int], None] | None = None) -> list[list[int]]:
    """The target's greedy continuation of each prompt, cut after the first EOS (kept) or at
    ``max_new_tokens``."""
    device = next(model.parameters()).device
    pad = eos_token_id if eos_token_id is not None else 0
    out: list[list[int]] = []
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths batch together
    results: dict[int, list[int]] = {}
    for s in range(0, len(order), batch_size):
        idx = order[s: s + batch_size]
        ids, mask = left_padded([prompts[i] for i in idx], pad)
        width = ids.shape[1]
        gen = clean_generate(model, ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
                             pad_token_id=pad, eos_token_id=eos_token_id)
        for row, i in enumerate(idx):
            toks = gen[row, width:].tolist()
            if eos_token_id is not None and eos_token_id in toks:
                toks = toks[: toks.index(eos_token_id) + 1]
            results[i] = toks
        if progress:
            progress(len(idx))
    for i in range(len(prompts)):
        out.append(results[i])
    return out


def left_padded(prompts: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, attention mask)``, long ``[len(prompts), longest]``, prompts right-aligned."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
        mask[row, width - len(p):] = 1
    return ids, mask


def decoder_of(model):
    """The decoder stack of a causal LM (its output is the final post-norm hidden state)."""
    return model.get_decoder() if hasattr(model, "get_decoder") else model.model


@torch.inference_mode()
def final_hidden_states(model, ids: Sequence[int]) -> torch.Tensor:
    """``[len(ids), H]`` post-norm final hidden states of one sequence (the LM head's input)."""
    device = next(model.parameters()).device
    out = decoder_of(model)(input_ids=torch.tensor([list(ids)], device=device))
    return out.last_hidden_state[0].float()


@dataclass
class SelfDistillation:
    """Records plus per-position training tensors (see the module docstring for the layout)."""

    records: list[dict]
    hidden: torch.Tensor  # [N, H] float16
    tokens: torch.Tensor  # [N] long: token at position t (the last prompt token or a response token)
    record: torch.Tensor  # [N] long: index into records

    def next_tokens(self, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(targets [N], valid [N])``: the token ``offset`` positions after each row, where it exists
        in the same record."""
        n = self.tokens.numel()
        idx = torch.arange(n) + offset
        ok = idx < n
        idx = idx.clamp(max=n - 1)
        valid = ok & (self.record[idx] == self.record)
        return self.tokens[idx].masked_fill(~valid, 0), valid


def with_hidden_states(model, records: Sequence[dict], progress: Callable[[str, int, int], None] | None = None
                       ) -> SelfDistillation:
    """Teacher-forced hidden states for records holding ``prompt_ids`` / ``response_ids`` (one forward each)."""
    hidden, tokens, which = [], [], []
    for i, rec in enumerate(records):
        p, r = rec["prompt_ids"], rec["response_ids"]
        if not p or not r:
            raise ValueError(f"record {i} (question {rec.get('question_id')}) has an empty prompt or response")
        seq = p + r
        h = final_hidden_states(model, seq)
        lo = len(p) - 1  # last prompt position: predicts the first response token
        hidden.append(h[lo:].half().cpu())
        tokens.append(torch.tensor(seq[lo:]))
        which.append(torch.full((len(seq) - lo,), i))
        if progress:
            progress("hidden", i + 1, len(records))
    return SelfDistillation(list(records), torch.cat(hidden), torch.cat(tokens).long(), torch.cat(which).long())


def cache_paths(cache_dir: str, target_fp: str, n: int, max_new_tokens: int, max_tokens: int | None = None
                ) -> tuple[str, str]:
    """``(responses .jsonl, hidden .safetensors)``; the hidden file names the token budget, if any."""
    stem = os.path.join(cache_dir, f"selfdistill-{target_fp}-{n}x{max_new_tokens}")
    budget = "" if max_tokens is None else f"-budget{max_tokens}"
    return stem + ".jsonl", stem + budget + ".safetensors"


def select_by_budget(records: Sequence[dict], max_tokens: int) -> list[dict]:
    """Shortest records first until ``max_tokens`` would be exceeded (bounds the teacher-forcing time);
    kept records stay in their original order."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    size = [len(r["prompt_ids"]) + len(r["response_ids"]) for r in records]
    keep, used = set(), 0
    for i in sorted(range(len(records)), key=lambda i: (size[i], i)):
        if used + size[i] > max_tokens:
            break
        keep.add(i)
        used += size[i]
    if not keep:
        raise ValueError(f"max_tokens={max_tokens} is smaller than the shortest record ({min(size)} tokens)")
    return [r for i, r in enumerate(records) if i in keep]


def save_tensors(data: SelfDistillation, path: str) -> None:
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    save_file({"hidden": data.hidden.contiguous(), "tokens": data.tokens, "record": data.record}, path)


def load_tensors(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path)


def save_records(records: Sequence[dict], jsonl: str) -> None:
    os.makedirs(os.path.dirname(jsonl) or ".", exist_ok=True)
    with open(jsonl + ".tmp", "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    os.replace(jsonl + ".tmp", jsonl)


def load_records(jsonl: str) -> list[dict]:
    return [rec for _, rec in read_jsonl(jsonl, "self-distillation records")]


def load_or_generate_responses(model, tokenizer, records: Sequence[dict], *, target_fp: str, max_new_tokens: int,
                               cache_dir: str = DEFAULT_CACHE_DIR, batch_size: int = 8,
                               progress: Callable[[str, int, int], None] | None = None) -> tuple[list[dict], str]:
    """The target's greedy responses to ``records`` (cached ``.jsonl``); returns ``(records, source)``."""
    jsonl, _ = cache_paths(cache_dir, target_fp, len(records), max_new_tokens)
    if os.path.isfile(jsonl):
        return load_records(jsonl), "cached responses"
    prompts = [encode_first_turn(tokenizer, r) for r in records]
    done = [0]

    def tick(k):
        done[0] += k
        if progress:
            progress("generate", done[0], len(prompts))

    outs = greedy_responses(model, prompts, max_new_tokens, tokenizer.eos_token_id, batch_size, tick)
    responses = [{"question_id": rec["question_id"], "category": rec["category"], "prompt_ids": p,
                  "response_ids": r} for rec, p, r in zip(records, prompts, outs) if r]
    save_records(responses, jsonl)
    return responses, "generated"


def load_or_build(model, tokenizer, records: Sequence[dict], *, target_fp: str, max_new_tokens: int,
                  cache_dir: str = DEFAULT_CACHE_DIR, batch_size: int = 8, max_tokens: int | None = None,
                  progress: Callable[[str, int, int], None] | None = None) -> tuple[SelfDistillation, str]:
    """Self-distillation data for this target, each stage cached (responses, then hidden states);
    ``max_tokens``: :func:`select_by_budget`. Returns ``(data, source)``, ``source`` one of
    ``"cached"``, ``"cached responses"``, ``"generated"``."""
    _, tensors = cache_paths(cache_dir, target_fp, len(records), max_new_tokens, max_tokens)
    responses, source = load_or_generate_responses(model, tokenizer, records, target_fp=target_fp,
                                                   max_new_tokens=max_new_tokens, cache_dir=cache_dir,
                                                   batch_size=batch_size, progress=progress)
    chosen = responses if max_tokens is None else select_by_budget(responses, max_tokens)
    if os.path.isfile(tensors):
        t = load_tensors(tensors)
        return SelfDistillation(chosen, t["hidden"], t["tokens"], t["record"]), "cached"
    data = with_hidden_states(model, chosen, progress)
    save_tensors(data, tensors)
    return data, source
