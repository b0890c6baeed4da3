"""Turn target logits into the processed distribution that speculative sampling preserves.

Exactness is about one distribution per position, the processed target (temperature, top-k, top-p,
min-p, in Hugging Face ``generate``'s order), so the sampler's target rows must be built with
:func:`process_logits`. Temperature 0 is the point mass on the first argmax (HF greedy search);
:attr:`SamplingParams.greedy` selects the cheaper greedy rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..checks import check_logits


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings the target distribution is processed with.

    Attributes:
        temperature: ``>= 0`` and finite. 0 means greedy decoding (argmax).
        top_k: keep the ``top_k`` most likely tokens (and any tied with the k-th); ``None`` = off.
        top_p: keep the smallest most-likely set reaching mass ``top_p``, in ``(0, 1]``; 1 = off.
        min_p: drop tokens below ``min_p`` times the most likely one, in ``[0, 1]``; 0 = off.

    Unlike HF ``generate(do_sample=True)`` (``top_k=50`` by default), ``SamplingParams()`` samples the
    whole distribution. ValueError / TypeError outside those ranges (nothing is clamped).
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    min_p: float = 0.0

    def __post_init__(self):
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise TypeError(f"SamplingParams.temperature must be a number, got {type(t).__name__}")
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"SamplingParams.temperature must be finite and >= 0, got {t}")
        k = self.top_k
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int):
                raise TypeError(f"SamplingParams.top_k must be an int or None, got {type(k).__name__}")
            if k < 1:
                raise ValueError(f"SamplingParams.top_k must be >= 1 (or None to disable), got {k}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise TypeError(f"SamplingParams.top_p must be a number, got {type(p).__name__}")
        if not (0 < p <= 1):
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {p}")
        m = self.min_p
        if isinstance(m, bool) or not isinstance(m, (int, float)):
            raise TypeError(f"SamplingParams.min_p must be a number, got {type(m).__name__}")
        if not (0 <= m <= 1):
            raise ValueError(f"SamplingParams.min_p must be in [0, 1], got {m}")

    @property
    def greedy(self) -> bool:
        """True at temperature 0: verify with the greedy rule (argmax), no randomness."""
        return self.temperature == 0

    def process(self, logits: torch.Tensor) -> torch.Tensor:
        """``process_logits(logits, self.temperature, self.top_k, self.top_p, self.min_p)``."""
        return process_logits(logits, self.temperature, self.top_k, self.top_p, self.min_p)


def process_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float = 1.0,
                   min_p: float = 0.0) -> torch.Tensor:
    """Processed distribution of float ``logits [..., V]`` under :class:`SamplingParams`' settings:
    float32 (float64 for float64 input) ``[..., V]``, the first argmax's point mass at temperature 0.
    Order: temperature; top-k (ties with the k-th kept); top-p (descending probability, ties by id, the
    top token always kept); min-p. ValueError for NaN / +inf, an all ``-inf`` row or bad parameters.
    """
    params = SamplingParams(temperature, top_k, top_p, min_p)
    check_logits(logits)
    work = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)
    if params.greedy:
        out = torch.zeros_like(work)
        return out.scatter_(-1, work.argmax(-1, keepdim=True), 1.0)
    work = work / params.temperature
    V = work.shape[-1]
    if params.top_k is not None and params.top_k < V:
        kth = work.topk(params.top_k, dim=-1).values[..., -1:]
        work = work.masked_fill(work < kth, -math.inf)
    probs = torch.softmax(work, dim=-1)
    if params.top_p < 1:
        # Stable descending sort: equal probabilities keep ascending token id order.
        order = torch.sort(probs, dim=-1, descending=True, stable=True).indices
        sorted_p = probs.gather(-1, order)
        mass_before = sorted_p.cumsum(-1) - sorted_p
        keep_sorted = mass_before < params.top_p
        keep_sorted[..., 0] = True
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if params.min_p > 0:
        # Relative to the most likely token, so renormalising after top-p does not move the cut.
        probs = probs.masked_fill(probs < params.min_p * probs.amax(-1, keepdim=True), 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


