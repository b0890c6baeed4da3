"""Synthetic self-distillation data: prompts the target writes itself, answered by its own greedy decoding.

A few hundred dev prompts over-fit a drafter; sampling the chat template's user prefix yields varied
requests in the target's idiom, and its greedy answers are what a drafter must imitate (none derives
from the dev prompts, so held-out records stay unseen). Features are captured while generating (a
hook on the final norm); the last generated token is never fed, so it is dropped from the record.
Records carry ``"source": "synthetic"`` and are never held out.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

import torch

from ..prompts import chat_ids
from ..models import clean_generate
from .data import decoder_of, left_padded
from .eagle1 import FullSequences


def user_prefix_ids(tokenizer) -> list[int]:
    """Chat-template ids up to a user message's text; ValueError without a chat template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("synthetic prompts need a chat template (the target writes the user turn)")
    marker = "\u2063XQ\u2063"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False)
    if marker not in text:
        raise ValueError("the chat template does not place the user message verbatim; cannot find the user prefix")
    return [int(t) for t in tokenizer(text[: text.index(marker)], add_special_tokens=False)["input_ids"]]


def _end_ids(tokenizer) -> list[int]:
    """Ids that end a turn: the eos token and, where the vocabulary has it, ``<|im_end|>``."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tokenizer.unk_token_id:
        ids.add(im_end)
    if not ids:
        raise ValueError("the tokenizer has no eos token: generated turns would never end")
    return sorted(ids)


class _FinalNormCapture:
    """Collects the decoder's final-norm outputs (the LM head's inputs) of every forward in a ``with``."""

    def __init__(self, model):
        base = decoder_of(model)
        self.norm = getattr(base, "norm", None)
        if self.norm is None:
            raise ValueError(f"{type(base).__name__} has no final 'norm' module to capture hidden states from")
        self.outputs: list[torch.Tensor] = []
        self._handle = None

    def _hook(self, _module, _inputs, output):
        self.outputs.append(output.detach().float().cpu())

    def __enter__(self):
        self._handle = self.norm.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self._handle.remove()


def _cut(tokens: list[int], ends: Sequence[int]) -> tuple[list[int], bool]:
    """``tokens`` up to and including the first end id; ``(kept, ended)``."""
    for j, t in enumerate(tokens):
        if t in ends:
            return tokens[: j + 1], True
    return tokens, False


@torch.inference_mode()
def generate_batch(model, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, ends: Sequence[int],
                   sample: dict | None, pad_id: int) -> list[tuple[list[int], bool, torch.Tensor]]:
    """Left-padded ``generate`` (``sample``: sampling kwargs, None: greedy). Per prompt
    ``(response, ended, hidden)``: response cut after the first end id, whether it reached one, and
    float32 ``[len(prompt) + len(response) - 1, H]`` features (all but the last token)."""
    from ..verify.patch import ForwardPatch

    device = next(model.parameters()).device
    ids, mask = left_padded(prompts, pad_id)
    width = ids.shape[1]
    with _FinalNormCapture(model) as cap, ForwardPatch(model, linears=model, attention=False):
        gen = clean_generate(model, ids.to(device), attention_mask=mask.to(device), max_new_tokens=max_new_tokens,
                             pad_token_id=pad_id, eos_token_id=list(ends), sample=sample)
    prefill, steps = cap.outputs[0], cap.outputs[1:]
    if prefill.shape[1] != width or any(s.shape[1] != 1 for s in steps):
        raise RuntimeError("unexpected forward shapes while capturing hidden states (is a static cache in use?)")
    out = []
    for r, p in enumerate(prompts):
        response, ended = _cut(gen[r, width:].tolist(), ends)
        fed = len(response) - 1  # response tokens fed back to the model (all but the last)
        parts = [prefill[r, width - len(p):]] + [steps[j][r] for j in range(fed)]
        out.append((response, ended, torch.cat(parts)))
    return out


def write_prompts(model, tokenizer, n: int, *, seed: int, max_tokens: int = 64, batch_size: int = 64,
                  temperature: float = 1.0, top_k: int = 100,
                  progress: Callable[[str, int, int], None] | None = None) -> list[str]:
    """``n`` distinct user turns ending within ``max_tokens``, sampled from the user-turn prefix
    (RuntimeError after 20 rounds short of ``n``)."""
    prefix = user_prefix_ids(tokenizer)
    ends = _end_ids(tokenizer)
    torch.manual_seed(seed)
    texts: list[str] = []
    seen: set[str] = set()
    for _ in range(20 * max(1, -(-n // batch_size))):
        if len(texts) >= n:
            break
        b = min(batch_size, 2 * (n - len(texts)))
        for response, ended, _ in generate_batch(model, [prefix] * b, max_new_tokens=max_tokens, ends=ends,
                                                 sample={"temperature": temperature, "top_k": top_k, "top_p": 1.0},
                                                 pad_id=ends[0]):
            text = tokenizer.decode(response[:-1] if ended else response, skip_special_tokens=True).strip()
            if ended and len(text) >= 8 and text not in seen and len(texts) < n:
                seen.add(text)
                texts.append(text)
        if progress:
            progress("synthetic prompts", len(texts), n)
    if len(texts) < n:
        raise RuntimeError(f"only {len(texts)} of {n} usable synthetic prompts after 20 rounds of sampling")
    return texts


def answer(model, tokenizer, texts: Sequence[str], *, max_new_tokens: int, batch_size: int = 64,
           progress: Callable[[str, int, int], None] | None = None) -> FullSequences:
    """The target's greedy answers to ``texts`` with every position's final hidden state (float16)."""
    ends = _end_ids(tokenizer)
    prompts = [chat_ids(tokenizer, t) for t in texts]
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))  # similar widths batch together
    done: dict[int, tuple[dict, torch.Tensor, list[int]]] = {}
    for s in range(0, len(order), batch_size):
        idx = order[s: s + batch_size]
        outs = generate_batch(model, [prompts[i] for i in idx], max_new_tokens=max_new_tokens, ends=ends,
                              sample=None, pad_id=ends[0])
        for i, (response, ended, hidden) in zip(idx, outs):
            kept = response[:-1]  # the last token has no feature (never fed back)
            if kept:
                rec = {"question_id": f"synthetic-{i}", "category": "synthetic", "source": "synthetic",
                       "text": texts[i], "prompt_ids": prompts[i], "response_ids": kept, "ended": ended}
                done[i] = (rec, hidden.half(), prompts[i] + kept)
        if progress:
            progress("synthetic answers", min(s + batch_size, len(order)), len(order))
    keep = [i for i in range(len(prompts)) if i in done]
    if not keep:
        raise RuntimeError(f"none of the {len(prompts)} synthetic prompts got an answer longer than one token")
    offsets = [0]
    for i in keep:
        offsets.append(offsets[-1] + len(done[i][2]))
    return FullSequences([done[i][0] for i in keep], torch.cat([done[i][1] for i in keep]),
                         torch.tensor([t for i in keep for t in done[i][2]], dtype=torch.long),
                         torch.tensor(offsets))


DEFAULT_BATCH = 64


def cache_path(cache_dir: str, target_fp: str, n: int, seed: int, max_new_tokens: int,
               batch_size: int = DEFAULT_BATCH) -> str:
    """Cache stem naming everything that changes the records (a non-default batch size included)."""
    batch = "" if batch_size == DEFAULT_BATCH else f"-batch{batch_size}"
    return os.path.join(cache_dir, f"selfdistill-{target_fp}-synthetic{n}-seed{seed}x{max_new_tokens}{batch}")


def load_or_build(model, tokenizer, n: int, *, target_fp: str, seed: int, max_new_tokens: int, cache_dir: str,
                  batch_size: int = DEFAULT_BATCH, progress: Callable[[str, int, int], None] | None = None
                  ) -> tuple[FullSequences, str]:
    """``n`` synthetic records with full-sequence features, cached by target fingerprint and seed;
    returns ``(data, "cached" | "generated")``."""
    from safetensors.torch import load_file, save_file

    from .data import load_records, save_records

    stem = cache_path(cache_dir, target_fp, n, seed, max_new_tokens, batch_size)
    if os.path.isfile(stem + ".jsonl") and os.path.isfile(stem + "-full.safetensors"):
        t = load_file(stem + "-full.safetensors")
        records = load_records(stem + ".jsonl")
        if (t["offsets"].numel() != len(records) + 1 or int(t["offsets"][-1]) != t["hidden"].shape[0]
                or t["tokens"].numel() != t["hidden"].shape[0]):
            raise ValueError(f"synthetic cache {stem}.* is inconsistent (records, offsets and features disagree): "
                             "delete both files to regenerate")
        return FullSequences(records, t["hidden"], t["tokens"], t["offsets"]), "cached"
    if n < 1:
        raise ValueError(f"the number of synthetic prompts must be >= 1, got {n}")
    texts = write_prompts(model, tokenizer, n, seed=seed, batch_size=batch_size, progress=progress)
    data = answer(model, tokenizer, texts, max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress)
    os.makedirs(cache_dir, exist_ok=True)
    save_file({"hidden": data.hidden, "tokens": data.tokens, "offsets": data.offsets},
              stem + "-full.safetensors.tmp")
    os.replace(stem + "-full.safetensors.tmp", stem + "-full.safetensors")
    save_records(data.records, stem + ".jsonl")
    return data, "generated"
