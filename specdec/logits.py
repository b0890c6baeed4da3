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


def prob_tolerance(dtype: torch.dtype) -> float:
    """How far a probability row may sum from 1 and still count as a distribution.

    Half-precision softmax rows are off by up to ~1e-3 over large vocabularies; float32 rows by
    ~1e-6. The tolerance only guards against passing logits or unnormalised scores by mistake.
    """
    return 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings the target distribution is processed with.

    Attributes:
        temperature: ``>= 0`` and finite. 0 means greedy decoding (argmax).
        top_k: keep the ``top_k`` most likely tokens (and any tied with the k-th); ``None`` = off.
        top_p: keep the smallest set of most likely tokens whose mass reaches ``top_p``, in
            ``(0, 1]``; 1 = off.

    Raises:
        ValueError / TypeError: for values outside those ranges (nothing is silently clamped).
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0

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

    @property
    def greedy(self) -> bool:
        """True at temperature 0: verify with the greedy rule (argmax), no randomness."""
        return self.temperature == 0

    def process(self, logits: torch.Tensor) -> torch.Tensor:
        """``process_logits(logits, self.temperature, self.top_k, self.top_p)``."""
        return process_logits(logits, self.temperature, self.top_k, self.top_p)


def check_logits(logits: torch.Tensor, name: str = "logits") -> None:
    """Raise ValueError for NaN or +inf entries, or a row that is entirely -inf.

    ``-inf`` is allowed: it is the standard way to mask a token (probability 0).
    """
    if not isinstance(logits, torch.Tensor) or not logits.dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point tensor, got {getattr(logits, 'dtype', type(logits).__name__)}")
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"{name} must have shape [..., V] with V > 0, got {tuple(logits.shape)}")
    if bool(torch.isnan(logits).any()):
        raise ValueError(f"{name} contain NaN: the target model produced invalid scores")
    if bool((logits == math.inf).any()):
        raise ValueError(f"{name} contain +inf: scores must be finite (use -inf to mask a token)")
    if logits.numel() and bool((logits.amax(-1) == -math.inf).any()):
        raise ValueError(f"{name} have a row where every entry is -inf: no token can be emitted")


def process_logits(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float = 1.0) -> torch.Tensor:
    """Processed target distribution from raw logits.

    Args:
        logits: ``[..., V]`` floating point.
        temperature, top_k, top_p: as in :class:`SamplingParams` (validated the same way).

    Returns:
        ``float32`` (or float64 for float64 input) probabilities ``[..., V]``, each row summing to 1.
        At temperature 0: the point mass on ``torch.argmax(logits, -1)`` (first maximal index),
        which is the distribution greedy decoding samples from.

    Order: temperature, top-k (keeps every token tied with the k-th largest logit, as Hugging Face
    does), top-p on the temperature-scaled, top-k-filtered distribution (keeps the smallest prefix of
    tokens sorted by descending probability, ties by ascending token id, whose mass reaches
    ``top_p``; the most likely token is always kept).

    Raises:
        ValueError: NaN / +inf logits, an all ``-inf`` row, or invalid parameters.
    """
    params = SamplingParams(temperature, top_k, top_p)
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
    return probs


def check_distributions(probs: torch.Tensor, valid_rows: torch.Tensor | None = None, name: str = "target_probs") -> None:
    """Raise ValueError unless every (valid) row of ``probs [..., V]`` is a distribution.

    Two reductions over the tensor (row ``amin`` and row sum); cheap next to the softmax
    that produced it. ``valid_rows`` (bool, ``probs.shape[:-1]``) excludes padding rows.
    """
    if not probs.dtype.is_floating_point:
        raise ValueError(f"{name} must be floating point probabilities, got {probs.dtype}")
    if probs.numel() == 0:
        return
    # float32 accumulation is ~25x faster than sum(dtype=float64) on CPU and accurate to ~1e-6 here.
    sums = (probs if probs.dtype in (torch.float32, torch.float64) else probs.float()).sum(-1)
    lo = probs.amin(-1)
    if valid_rows is not None:
        sums = torch.where(valid_rows, sums, torch.ones_like(sums))
        lo = torch.where(valid_rows, lo, torch.zeros_like(lo))
    if not bool(torch.isfinite(sums).all()):
        bad = (~torch.isfinite(sums)).nonzero()[0].tolist()
        raise ValueError(f"{name} row {bad} contains NaN or inf: target probabilities must be finite")
    if bool((lo < 0).any()):
        bad = (lo < 0).nonzero()[0].tolist()
        raise ValueError(f"{name} row {bad} has negative entries: expected probabilities (did you pass logits?)")
    tol = prob_tolerance(probs.dtype)
    off = (sums - 1).abs() > tol
    if bool(off.any()):
        bad = off.nonzero()[0].tolist()
        raise ValueError(
            f"{name} row {bad} sums to {float(sums[tuple(bad)]):.6g}, not 1 (tolerance {tol}): "
            "expected probabilities (use process_logits on logits)"
        )
