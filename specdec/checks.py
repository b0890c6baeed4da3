"""Input checks shared by every stage: token ids, draft budgets, probability rows.

Each check lives here once, so a malformed input gets the same error wherever it enters; they guard
public entry points (the engine's trusted path passes checked values along).
"""

from __future__ import annotations

import math
import numbers
from typing import Hashable, Sequence

import numpy as np
import torch


def normalize_budgets(req_ids: Sequence[Hashable], budget: int | Sequence[int]) -> list[int]:
    """One non-negative node budget per request (``budget`` is an int for all, or a sequence)."""
    if isinstance(budget, torch.Tensor) and budget.dim() == 0:
        budget = budget.item()
    if isinstance(budget, numbers.Integral) and not isinstance(budget, bool):
        budgets = [int(budget)] * len(req_ids)
    else:
        try:
            items = list(budget)
        except TypeError:
            raise TypeError(f"propose budget must be an int or one int per request, got {budget!r}") from None
        budgets = [_one_budget(b) for b in items]
        if len(budgets) != len(req_ids):
            raise ValueError(f"propose got {len(budgets)} budgets for {len(req_ids)} requests")
    for b in budgets:
        if b < 0:
            raise ValueError(f"propose budget must be >= 0, got {b}")
    return budgets


def _one_budget(b) -> int:
    """An integer budget (Python, numpy or 0-d tensor int); floats and bools are refused."""
    if isinstance(b, torch.Tensor) and b.dim() == 0:
        b = b.item()
    if isinstance(b, bool) or not isinstance(b, numbers.Integral):
        raise TypeError(f"propose budgets must be integers, got {b!r}")
    return int(b)


def as_token_list(ids: Sequence[int] | torch.Tensor, what: str, vocab_size: int | None = None) -> list[int]:
    """A 1-D integer tensor or int sequence as Python ints in ``[0, vocab_size)``. TypeError for float,
    complex or bool ids (never truncated); ValueError, naming ``what``, for a non-1-D tensor or an id
    out of range."""
    if isinstance(ids, torch.Tensor):
        _check_integer_tensor(ids, what)
        if ids.dim() != 1:
            raise ValueError(f"{what} must be a 1-D tensor, got shape {tuple(ids.shape)}")
        out = ids.tolist()
    else:
        out = list(ids)
        bad = next((t for t in out if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer))), None)
        if bad is not None:
            raise TypeError(f"{what} must hold integer token ids, got {type(bad).__name__} {bad!r}")
        out = [int(t) for t in out]
    if out and min(out) < 0:
        raise ValueError(f"{what} contains negative token id {min(out)}")
    if vocab_size is not None and out and max(out) >= vocab_size:
        raise ValueError(f"{what} contains token id {max(out)}, outside the vocabulary [0, {vocab_size})")
    return out


def as_token_array(ids, vocab_size: int, what: str) -> np.ndarray:
    """Token ids as a 1-D contiguous int32 numpy array, validated against ``[0, vocab_size)``.

    Accepts a sequence of ints, an integer numpy array or an integer torch tensor (CPU).

    Raises:
        TypeError: floating-point / boolean / non-integer input.
        ValueError: not 1-D, or an id outside ``[0, vocab_size)``.
    """
    if isinstance(ids, torch.Tensor):
        _check_integer_tensor(ids, what)
        arr = ids.detach().cpu().numpy()
    else:
        arr = np.asarray(ids)
        if arr.size == 0:
            arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must hold integer token ids, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{what} must be 1-D, got shape {tuple(arr.shape)}")
    if arr.size:
        # Python's min/max are cheaper than numpy reductions on the few ids of a commit.
        lo, hi = (min(ids), max(ids)) if isinstance(ids, list) else (int(arr.min()), int(arr.max()))
        if lo < 0 or hi >= vocab_size:
            bad = int(arr[(arr < 0) | (arr >= vocab_size)][0])
            raise ValueError(f"{what} contains token id {bad}, expected ids in [0, {vocab_size})")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _check_integer_tensor(ids: torch.Tensor, what: str) -> None:
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{what} must hold integer token ids, got a {ids.dtype} tensor")


def prob_tolerance(dtype: torch.dtype) -> float:
    """How far a row may sum from 1 and still be a distribution (loose for half precision: it only
    catches logits or unnormalised scores passed by mistake)."""
    return 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


def check_logits(logits: torch.Tensor, name: str = "logits") -> None:
    """ValueError for NaN or +inf entries or an all ``-inf`` row (``-inf`` masks a token)."""
    if not isinstance(logits, torch.Tensor) or not logits.dtype.is_floating_point:
        raise TypeError(
            f"{name} must be a floating-point tensor, got {getattr(logits, 'dtype', type(logits).__name__)}"
        )
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"{name} must have shape [..., V] with V > 0, got {tuple(logits.shape)}")
    if bool(torch.isnan(logits).any()):
        raise ValueError(f"{name} contain NaN: the target model produced invalid scores")
    if bool((logits == math.inf).any()):
        raise ValueError(f"{name} contain +inf: scores must be finite (use -inf to mask a token)")
    if logits.numel() and bool((logits.amax(-1) == -math.inf).any()):
        raise ValueError(f"{name} have a row where every entry is -inf: no token can be emitted")


def check_distributions(
    probs: torch.Tensor, valid_rows: torch.Tensor | None = None, name: str = "target_probs"
) -> None:
    """ValueError unless every row of ``probs [..., V]`` selected by ``valid_rows`` (bool,
    ``probs.shape[:-1]``; None: all) is a distribution (two reductions)."""
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
        bad = _row((~torch.isfinite(sums)).nonzero()[0].tolist())
        raise ValueError(f"{name} row {bad} contains NaN or inf: probabilities must be finite")
    if bool((lo < 0).any()):
        bad = _row((lo < 0).nonzero()[0].tolist())
        raise ValueError(f"{name} row {bad} has negative entries: expected probabilities (did you pass logits?)")
    tol = prob_tolerance(probs.dtype)
    off = (sums - 1).abs() > tol
    if bool(off.any()):
        bad = off.nonzero()[0].tolist()
        raise ValueError(
            f"{name} row {_row(bad)} sums to {float(sums[tuple(bad)]):.6g}, not 1 (tolerance {tol}): "
            "expected probabilities (use process_logits on logits)"
        )


def _row(index: list[int]):
    """A row index as errors print it: ``3`` for a table of rows, ``[b, i]`` for a batch of them."""
    return index[0] if len(index) == 1 else index
