"""The exact law of an engine's first ``L`` tokens, enumerated from the checkpoint it serves.

Symbols are tokens ``0 .. V - 1`` and ``END = V`` (after a stop token); a sequence is coded base ``V + 1``,
first token most significant, as :func:`specdec.conformance.suite.window_law_tests` codes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .processing import Profile
from .settings import Sampling

_CHUNK = 2048


@dataclass(frozen=True)
class LogitTable:
    """Raw logits after every continuation of ``prompt``: ``logits float32 [V ** (L - 1), L, V]`` (row ``m``,
    position ``j``: after the first ``j`` tokens of continuation ``m``), ``cont [V ** (L - 1), L - 1]``."""

    prompt: tuple[int, ...]
    vocab: int
    length: int
    logits: torch.Tensor
    cont: torch.Tensor


@torch.no_grad()
def logit_table(model, prompt: Sequence[int], length: int) -> LogitTable:
    """Teacher-force ``model`` (a Hugging Face causal LM) over every continuation of ``prompt``, reusing the
    prompt's KV cache. Raises ValueError above ~2**26 logits (the audit is for tiny vocabularies)."""
    import copy
    import inspect

    vocab = int(model.get_output_embeddings().weight.shape[0])
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    M = vocab ** (length - 1)
    if M * length * vocab > 2 ** 26:
        raise ValueError(f"enumerating {vocab} ** {length - 1} continuations is too large: use a vocabulary of "
                         "<= 16 and <= 5 tokens")
    if not prompt or min(prompt) < 0 or max(prompt) >= vocab:
        raise ValueError(f"prompt must be non-empty token ids in [0, {vocab})")
    digits = vocab ** torch.arange(length - 2, -1, -1) if length > 1 else torch.zeros(0, dtype=torch.long)
    cont = (torch.arange(M).unsqueeze(1) // digits) % vocab if length > 1 else torch.zeros(1, 0, dtype=torch.long)
    head = model(input_ids=torch.tensor([list(prompt)]), use_cache=True)
    first = head.logits[0, -1].float()
    # transformers renamed past_key_values to cache (5.2x); take whichever this version has.
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    prompt_cache = head[name]
    if length == 1:
        return LogitTable(tuple(int(t) for t in prompt), vocab, length, first.view(1, 1, vocab), cont)
    positions = torch.arange(len(prompt), len(prompt) + length - 1)
    out = []
    for start in range(0, M, _CHUNK):
        c = cont[start:start + _CHUNK]
        past = copy.deepcopy(prompt_cache)
        past.batch_repeat_interleave(c.shape[0])
        rest = model(input_ids=c, **{name: past}, position_ids=positions.expand(c.shape[0], -1)).logits
        out.append(torch.cat([first.expand(c.shape[0], 1, vocab), rest.float()], 1))
    return LogitTable(tuple(int(t) for t in prompt), vocab, length, torch.cat(out), cont)


class LogitTables:
    """The logit tables of one model at one length, per prompt, computed on first use (owned by a run, never
    global)."""

    def __init__(self, model, length: int):
        self.model, self.length = model, length
        self._tables: dict = {}

    def __getitem__(self, prompt) -> LogitTable:
        key = tuple(int(t) for t in prompt)
        if key not in self._tables:
            self._tables[key] = logit_table(self.model, key, self.length)
        return self._tables[key]


def processed(table: LogitTable, sampling: Sampling, profile: Profile) -> torch.Tensor:
    """``float64 [M, L, V]``: the processed next-token law at every row of ``table``."""
    V, L = table.vocab, table.length
    sampling.check_vocab(V)
    M = table.logits.shape[0]
    prompt_counts = torch.bincount(torch.tensor(table.prompt), minlength=V)
    onehot = torch.nn.functional.one_hot(table.cont, V).long() if L > 1 else torch.zeros(M, 0, V, dtype=torch.long)
    out_counts = torch.cat([torch.zeros(M, 1, V, dtype=torch.long), onehot.cumsum(1)], 1)  # [M, L, V]
    rows = profile.probs(table.logits.reshape(M * L, V), prompt_counts, out_counts.reshape(M * L, V), sampling)
    return rows.view(M, L, V)


def exact_law(table: LogitTable, sampling: Sampling, profile: Profile) -> torch.Tensor:
    """``float64 [(V + 1) ** L]``: the law of the first ``L`` symbols under ``sampling`` as ``profile``
    processes it (tokens after the first stop token are END)."""
    V, L = table.vocab, table.length
    probs = processed(table, sampling, profile)
    M = probs.shape[0]
    prefix = probs[:, :-1].gather(2, table.cont.unsqueeze(2)).squeeze(2).prod(1) if L > 1 else torch.ones(M,
                                                                                                        dtype=torch.float64)
    full = prefix.unsqueeze(1) * probs[:, -1]  # [M, V]: sequence cont_m + (v,)
    seqs = torch.cat([table.cont.unsqueeze(1).expand(M, V, L - 1), torch.arange(V).view(1, V, 1).expand(M, V, 1)], 2)
    codes = encode(seqs.reshape(M * V, L), sampling.stop_tokens, V)
    law = torch.zeros((V + 1) ** L, dtype=torch.float64)
    return law.index_add_(0, codes, full.reshape(-1))


def end_after_stop(seqs: torch.Tensor, stop_tokens: Sequence[int], vocab: int) -> torch.Tensor:
    """``seqs [T, L]`` with every symbol after the first stop token replaced by END (``vocab``)."""
    if not stop_tokens:
        return seqs
    is_stop = torch.isin(seqs, torch.tensor(list(stop_tokens), dtype=seqs.dtype))
    after = (is_stop.long().cumsum(1) - is_stop.long()) > 0  # strictly after the first stop
    return seqs.masked_fill(after, vocab)


def encode(seqs: torch.Tensor, stop_tokens: Sequence[int], vocab: int) -> torch.Tensor:
    """Base-``vocab + 1`` codes of ``seqs [T, L]`` (first symbol most significant), END after stops."""
    s = end_after_stop(seqs.long(), stop_tokens, vocab)
    code = torch.zeros(s.shape[0], dtype=torch.long)
    for j in range(s.shape[1]):
        code = code * (vocab + 1) + s[:, j]
    return code


def pad_outputs(outputs: Sequence[Sequence[int]], length: int, vocab: int) -> torch.Tensor:
    """``LongTensor [T, length]``: outputs cut at ``length``, padded with END. Tokens after a stop, or an early
    end without one, are kept as observed: the law makes them impossible. ValueError: a token outside the
    vocabulary."""
    out = torch.full((len(outputs), length), vocab, dtype=torch.long)
    for i, toks in enumerate(outputs):
        toks = [int(t) for t in list(toks)[:length]]
        if any(not 0 <= t < vocab for t in toks):
            raise ValueError(f"output {i} holds a token outside [0, {vocab}): {toks}")
        if toks:
            out[i, :len(toks)] = torch.tensor(toks, dtype=torch.long)
    return out


def tv_distance(p: torch.Tensor, q: torch.Tensor) -> float:
    """Total variation ``0.5 * sum |p - q|``."""
    return float(0.5 * (p - q).abs().sum())
