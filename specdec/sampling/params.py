"""Turn target logits into the processed distribution that speculative sampling preserves.

The exactness guarantee of :mod:`specdec.sampling` is about *one* distribution per position: the
target's processed distribution (temperature, then top-k, then top-p, the order Hugging Face
``generate`` applies them). The verifier must see exactly that distribution, so the same helper
must be used to build the target rows the sampler receives; that is what :func:`process_logits`
is for. Temperature 0 means greedy decoding: the processed distribution is then the point mass on
``torch.argmax(logits)`` (the first maximal index, as Hugging Face greedy search picks), and
:attr:`SamplingParams.greedy` tells the caller to use the cheaper greedy rule.
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
        top_p: keep the smallest set of most likely tokens whose mass reaches ``top_p``, in
            ``(0, 1]``; 1 = off.
        min_p: drop tokens less likely than ``min_p`` times the most likely one, in ``[0, 1]``;
            0 = off (Hugging Face's ``min_p``, applied after top-p as ``generate`` does).

    Unlike Hugging Face's ``generate(do_sample=True)``, which applies ``top_k=50`` unless told
    otherwise, ``SamplingParams()`` samples from the whole distribution: pass ``top_k=50`` to compare
    like with like (a decoder built on a checkpoint with ``do_sample=True`` takes the checkpoint's
    values, 50 included, as its default: :mod:`specdec.sampling.processors`).

    Raises:
        ValueError / TypeError: for values outside those ranges (nothing is silently clamped).
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
    """Processed target distribution from raw logits.

    Args:
        logits: ``[..., V]`` floating point.
        temperature, top_k, top_p, min_p: as in :class:`SamplingParams` (validated the same way).

    Returns:
        ``float32`` (or float64 for float64 input) probabilities ``[..., V]``, each row summing to 1.
        At temperature 0: the point mass on ``torch.argmax(logits, -1)`` (first maximal index),
        which is the distribution greedy decoding samples from.

    Order: temperature, top-k (keeps every token tied with the k-th largest logit, as Hugging Face
    does), top-p on the temperature-scaled, top-k-filtered distribution (keeps the smallest prefix of
    tokens sorted by descending probability, ties by ascending token id, whose mass reaches
    ``top_p``; the most likely token is always kept), then min-p (tokens below ``min_p`` times the
    most likely token's probability are dropped).

    Raises:
        ValueError: NaN / +inf logits, an all ``-inf`` row, or invalid parameters.
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


