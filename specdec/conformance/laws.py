"""Small-vocabulary target models, drafter specifications and the exact law they imply.

A model is a callable ``model(prefix: tuple[int]) -> Tensor[V]`` of probabilities; models here are
deterministic in the prefix (seeded by its hash), so exact laws can be enumerated while every prefix
gets its own distribution.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..sampling.params import process_logits

Model = Callable[[tuple], torch.Tensor]


@dataclass(frozen=True)
class TableModel:
    """Pseudo-random distributions over ``vocab`` tokens, one per prefix: ``seed`` (target vs drafter),
    ``scale`` (logit std), ``zero_frac`` (tokens at exactly 0 per row, never all), ``one_hot_frac``
    (point-mass prefixes), ``logits`` (raw logits, for :class:`ProcessedModel`)."""

    vocab: int
    seed: int
    scale: float = 1.5
    zero_frac: float = 0.0
    one_hot_frac: float = 0.0
    logits: bool = False

    def __call__(self, prefix: tuple) -> torch.Tensor:
        key = zlib.crc32(repr((self.seed, tuple(int(t) for t in prefix))).encode())
        g = torch.Generator().manual_seed(key)
        z = torch.randn(self.vocab, generator=g, dtype=torch.float64) * self.scale
        u = torch.rand(self.vocab + 1, generator=g, dtype=torch.float64)
        if self.logits:
            return z
        if u[-1] < self.one_hot_frac:
            return torch.zeros(self.vocab, dtype=torch.float64).index_fill_(0, z.argmax().view(1), 1.0)
        mask = u[: self.vocab] < self.zero_frac
        mask[z.argmax()] = False
        return torch.softmax(z.masked_fill(mask, float("-inf")), 0)


@dataclass(frozen=True)
class ProcessedModel:
    """``process_logits(logit_model(prefix), temperature, top_k, top_p)``: the processed target."""

    logit_model: Model
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0

    def __call__(self, prefix: tuple) -> torch.Tensor:
        return process_logits(self.logit_model(prefix).unsqueeze(0), self.temperature, self.top_k, self.top_p)[
            0
        ].double()


@dataclass(frozen=True)
class DraftSpec:
    """The drafter's tree at every step: ``model`` (``q(prefix)``) and ``nodes``, ``(parent, kind)`` in
    node order (parent ``-1`` = root); ``kind`` ``"sample"`` (i.i.d. from ``q``) or ``"top"`` (the
    ``r``-th most likely under ``q``, ``r`` = earlier ``"top"`` siblings, ties to the lower id)."""

    model: Model
    nodes: tuple[tuple[int, str], ...]

    def __post_init__(self):
        for i, (parent, kind) in enumerate(self.nodes):
            if not -1 <= parent < i:
                raise ValueError(f"DraftSpec node {i} has parent {parent}: must be -1 or an earlier node")
            if kind not in ("sample", "top"):
                raise ValueError(f"DraftSpec node {i} has kind {kind!r}: expected 'sample' or 'top'")

    @property
    def top_rank(self) -> list[int]:
        """Rank under ``q`` picked by each ``"top"`` node (0 for sampled nodes)."""
        seen: dict[int, int] = {}
        ranks = []
        for parent, kind in self.nodes:
            if kind == "top":
                ranks.append(seen.get(parent, 0))
                seen[parent] = ranks[-1] + 1
            else:
                ranks.append(0)
        return ranks

    @classmethod
    def chain(cls, model: Model, length: int, kind: str = "sample") -> "DraftSpec":
        return cls(model, tuple((i - 1, kind) for i in range(length)))


def exact_law(target: Model, prompt: Sequence[int], length: int, vocab: int) -> torch.Tensor:
    """``float64 [V ** length]``: probability of each emitted sequence ``t_1..t_length`` when the
    target is sampled token by token after ``prompt`` (index = base-V number, ``t_1`` most significant)."""
    law = torch.ones(1, dtype=torch.float64)
    prefixes: list[tuple] = [tuple(prompt)]
    for _ in range(length):
        rows = torch.stack([_as_probs(target(p), vocab) for p in prefixes])
        law = (law.unsqueeze(1) * rows).reshape(-1)
        prefixes = [p + (t,) for p in prefixes for t in range(vocab)]
    return law


def _as_probs(row: torch.Tensor, vocab: int) -> torch.Tensor:
    row = torch.as_tensor(row, dtype=torch.float64)
    if row.shape != (vocab,) or not bool(torch.isfinite(row).all()) or bool((row < 0).any()):
        raise ValueError(
            f"model returned {tuple(row.shape)} / invalid values: expected a probability vector [V={vocab}]"
        )
    if abs(float(row.sum()) - 1) > 1e-6:
        raise ValueError(f"model returned a row summing to {float(row.sum())}, expected 1")
    return row


class PrefixTable:
    """Memoised model rows by prefix code (``c_1..c_L`` -> ``sum_j (c_j + 1) * (V + 1) ** (j - 1)``),
    one model call per distinct prefix."""

    def __init__(self, model: Model, prompt: Sequence[int], vocab: int, dtype=torch.float32):
        self.model = model
        self.prompt = tuple(prompt)
        self.vocab = vocab
        self.dtype = dtype
        self.index: dict[int, int] = {}
        self.rows = torch.zeros(0, vocab, dtype=dtype)

    def decode(self, code: int) -> tuple:
        out = []
        while code:
            code, digit = divmod(code, self.vocab + 1)
            out.append(digit - 1)
        return self.prompt + tuple(out)

    def lookup(self, codes: torch.Tensor) -> torch.Tensor:
        """``[*codes.shape, V]`` model rows for prefix codes ``codes`` (LongTensor)."""
        uniq, inverse = torch.unique(codes.reshape(-1), return_inverse=True)
        keys = uniq.tolist()
        new = [c for c in keys if c not in self.index]
        if new:
            start = self.rows.shape[0]
            fresh = torch.stack([_as_probs(self.model(self.decode(c)), self.vocab) for c in new]).to(self.dtype)
            self.rows = torch.cat([self.rows, fresh])
            for j, c in enumerate(new):
                self.index[c] = start + j
        slots = torch.tensor([self.index[c] for c in keys], dtype=torch.long)
        return self.rows[slots[inverse]].reshape(*codes.shape, self.vocab)
