"""Step-time cost model of a target, fitted from short calibration runs on this machine.

Whether speculation pays depends on what one more verified token costs at this batch and context,
which differs between GPU and CPU, so it is measured. A forward of ``B`` sequences, each feeding ``n``
new tokens over ``C`` cached ones, is a non-negative combination of six work terms::

    t(B, n, C) = w0                      # fixed per-step overhead (kernel launches, Python)
               + w1 * B                  # per-sequence overhead (cache bookkeeping, sampling)
               + w2 * B * n              # per-token work (the matmuls over the weights)
               + w3 * B * n * (C + (n + 1) / 2)   # attention: each new token reads C + its own prefix
               + w4 * B * C              # reading the KV cache once per sequence
               + w5 * B * [n > 1]        # the jump from one row to several (multi-token kernels)

Prefill of ``P`` tokens is ``n = P, C = 0``. Fitted by non-negative least squares on relative error;
mean, worst and leave-one-out errors are kept with the model. A trace of an engine's own steps is
fitted ``by_time``: each step's squared relative error weighted by its length, so that hundreds of
short decode steps do not outvote the few long prefills that can hold most of the server's time (a
designed calibration grid weighs each point alike).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from .fit import nonnegative_lstsq

FEATURE_NAMES = ("fixed", "per_seq", "per_token", "attention", "kv_read", "multi_token")


def features(batch: float, tokens: float, context: float, multi_rows: float | None = None) -> np.ndarray:
    """Work terms ``[6]`` of one forward; ``multi_rows``: rows feeding more than one token (default
    all when ``tokens > 1``, else none; a mean for averaged engine steps)."""
    b, n, c = float(batch), float(tokens), float(context)
    m = b * (n > 1.0) if multi_rows is None else float(multi_rows)
    return np.array([1.0, b, b * n, b * n * (c + (n + 1.0) / 2.0), b * c, m])


@dataclasses.dataclass(frozen=True)
class Sample:
    """One timed forward: ``batch`` x ``tokens`` new tokens on ``context`` cached ones (may be means;
    ``multi_rows``: see :func:`features`)."""

    batch: int
    tokens: float
    context: float
    seconds: float
    multi_rows: float | None = None

    def work(self) -> np.ndarray:
        """Its work terms ``[6]`` (:func:`features`)."""
        return features(self.batch, self.tokens, self.context, self.multi_rows)


@dataclasses.dataclass(frozen=True)
class StepSample:
    """One timed engine step by its work terms (``[6]``, :data:`FEATURE_NAMES` order): a packed step
    mixing decode rows and prefill chunks has no single ``(batch, tokens, context)``."""

    terms: tuple[float, ...]
    seconds: float

    def work(self) -> np.ndarray:
        return np.asarray(self.terms, dtype=np.float64)


def packed_features(pieces: Sequence[tuple[float, float]], weights: Sequence[float] | None = None) -> np.ndarray:
    """Work terms ``[6]`` of a packed step: the sum over pieces ``(new tokens, cached context)`` of a
    one-sequence forward each (times its weight, default 1), with the fixed term counted once."""
    if any(n < 0 or c < 0 for n, c in pieces):
        raise ValueError(f"packed pieces need new tokens and context >= 0, got {list(pieces)}")
    ws = [1.0] * len(pieces) if weights is None else [float(w) for w in weights]
    if len(ws) != len(pieces) or any(w < 0 for w in ws):
        raise ValueError("packed_features needs one weight >= 0 per piece")
    total = np.zeros(len(FEATURE_NAMES))
    for (n, c), w in zip(pieces, ws):
        if n > 0 and w > 0:
            total += w * features(1, n, c)
    total[0] = 1.0 if total[1:].any() else 0.0
    return total


@dataclasses.dataclass
class StepCostModel:
    """Predicts target forward time in seconds from ``weights`` (six, :data:`FEATURE_NAMES` order);
    keeps ``mean_rel_error`` / ``max_rel_error`` / ``loo_rel_error`` (fractions), ``samples``,
    ``outliers`` (dropped as disturbed) and ``meta`` (model, dtype, threads, host)."""

    weights: np.ndarray
    mean_rel_error: float = float("nan")
    max_rel_error: float = float("nan")
    loo_rel_error: float = float("nan")
    samples: list[Sample | StepSample] = dataclasses.field(default_factory=list)
    meta: dict = dataclasses.field(default_factory=dict)
    outliers: list[Sample | StepSample] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        w = np.asarray(self.weights, dtype=np.float64)
        if w.shape != (len(FEATURE_NAMES),):
            raise ValueError(
                f"StepCostModel weights must have {len(FEATURE_NAMES)} entries {FEATURE_NAMES}, got shape {w.shape}"
            )
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"StepCostModel weights must be finite and >= 0, got {w.tolist()}")
        if w.sum() <= 0:
            raise ValueError("StepCostModel weights are all zero: the model would predict free steps")
        self.weights = w

    # ------------------------------------------------------------------ prediction
    def step_time(self, batch: int, tokens_per_seq: int, context: float) -> float:
        """Seconds for one forward of ``batch`` x ``tokens_per_seq`` new tokens over ``context`` cached."""
        if batch < 0 or tokens_per_seq < 0 or context < 0:
            raise ValueError(
                f"step_time needs batch, tokens_per_seq, context >= 0, got {batch}, {tokens_per_seq}, {context}"
            )
        if batch == 0 or tokens_per_seq == 0:
            return 0.0
        return float(features(batch, tokens_per_seq, context) @ self.weights)

    def error_band(self, cap: float = 0.5) -> float:
        """Leave-one-out relative error capped at ``cap`` (0 if NaN): a plan's default cost band."""
        loo = self.loo_rel_error
        return min(cap, loo) if math.isfinite(loo) and loo >= 0 else 0.0

    def scaled(self, factor: float) -> "StepCostModel":
        """Every weight times ``factor`` (a machine that much slower), for the plan's cost band."""
        if not factor > 0:
            raise ValueError(f"a cost scale factor must be > 0, got {factor}")
        return dataclasses.replace(self, weights=self.weights * float(factor),
                                   meta={**self.meta, "scaled": float(factor)})

    def packed_step_time(self, pieces: Sequence[tuple[int, float]]) -> float:
        """Seconds for one packed forward (vLLM V1: no padding): the sum of one-sequence forwards
        over pieces ``(new tokens, cached context)``, fixed term once, 0-token pieces free."""
        return float(packed_features(pieces) @ self.weights)

    def prefill_time(self, prompt_lens: Sequence[int]) -> float:
        """Seconds to prefill a group of prompts in one padded forward (``n`` = longest prompt)."""
        lens = [int(p) for p in prompt_lens]
        if not lens:
            return 0.0
        if min(lens) <= 0:
            raise ValueError(f"prefill_time needs prompt lengths >= 1, got {lens}")
        return self.step_time(len(lens), max(lens), 0)

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, samples: Sequence[Sample | StepSample], meta: dict | None = None, *,
            trim: bool = True, by_time: bool = False) -> "StepCostModel":
        """NNLS on relative error plus leave-one-out error; ``trim`` sets aside (at most a quarter of)
        points slower than the first fit by over ``max(0.25, 4 x median relative error)`` and refits.
        ``by_time``: each point's squared relative error weighted by its seconds over the median's
        (module docstring); the leave-one-out error is then the same weighted mean, so the band it
        sets is the error in engine time. ``meta["by_time"]`` records it."""
        samples = list(samples)
        if len(samples) < len(FEATURE_NAMES) + 1:
            raise ValueError(f"StepCostModel.fit needs at least {len(FEATURE_NAMES) + 1} samples, got {len(samples)}")
        for s in samples:
            if not (s.seconds > 0 and math.isfinite(s.seconds)):
                raise ValueError(f"calibration sample has a non-positive or non-finite time: {s}")
        X = np.stack([s.work() for s in samples])
        y = np.array([s.seconds for s in samples])
        w = _nnls_relative(X, y, by_time)
        outliers: list[Sample | StepSample] = []
        if trim:
            excess = (y - X @ w) / y  # > 0: slower than the fit
            limit = max(0.25, 4 * float(np.median(np.abs(excess))))
            worst = np.argsort(-excess)[: len(samples) // 4]
            drop = {int(i) for i in worst if excess[i] > limit}
            if drop and len(samples) - len(drop) >= len(FEATURE_NAMES) + 1:
                outliers = [samples[i] for i in sorted(drop)]
                keep = np.array([i not in drop for i in range(len(samples))])
                samples, X, y = [s for i, s in enumerate(samples) if keep[i]], X[keep], y[keep]
                w = _nnls_relative(X, y, by_time)
        rel = np.abs(X @ w - y) / y
        loo = []
        for i in range(len(samples)):
            keep = np.arange(len(samples)) != i
            wi = _nnls_relative(X[keep], y[keep], by_time)
            loo.append(abs(float(X[i] @ wi) - y[i]) / y[i])
        mean = (lambda e: float(np.average(e, weights=y))) if by_time else (lambda e: float(np.mean(e)))
        info = {**(meta or {}), "by_time": True} if by_time else dict(meta or {})
        return cls(w, mean(rel), float(rel.max()), mean(np.asarray(loo)), samples, info, outliers)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        return {
            "kind": "specdec.StepCostModel",
            "features": list(FEATURE_NAMES),
            "weights": self.weights.tolist(),
            "mean_rel_error": self.mean_rel_error,
            "max_rel_error": self.max_rel_error,
            "loo_rel_error": self.loo_rel_error,
            "samples": [dataclasses.asdict(s) for s in self.samples],
            "outliers": [dataclasses.asdict(s) for s in self.outliers],
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "StepCostModel":
        if not isinstance(d, dict) or d.get("kind") != "specdec.StepCostModel":
            raise ValueError("not a StepCostModel file: expected a JSON object with kind='specdec.StepCostModel'")
        if list(d.get("features", [])) != list(FEATURE_NAMES):
            raise ValueError(
                f"cost model features {d.get('features')} differ from this version's {list(FEATURE_NAMES)}; recalibrate"
            )
        return cls(
            np.asarray(d["weights"], dtype=np.float64),
            float(d.get("mean_rel_error", "nan")),
            float(d.get("max_rel_error", "nan")),
            float(d.get("loo_rel_error", "nan")),
            [_sample_from(s) for s in d.get("samples", [])],
            dict(d.get("meta", {})),
            [_sample_from(s) for s in d.get("outliers", [])],
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "StepCostModel":
        try:
            d = json.loads(Path(path).read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"cost model file {path} is not valid JSON: {e}") from e
        return cls.from_dict(d)


def _sample_from(d: dict) -> Sample | StepSample:
    return StepSample(tuple(d["terms"]), d["seconds"]) if "terms" in d else Sample(**d)


def _nnls_relative(X: np.ndarray, y: np.ndarray, by_time: bool = False) -> np.ndarray:
    """argmin_{w >= 0} sum_i v_i ((X_i w - y_i) / y_i)^2 with ``v_i = 1``, or ``y_i / median(y)``
    ``by_time``: relative error, by :mod:`specdec.estimate.fit`."""
    return nonnegative_lstsq(X / y[:, None], np.ones_like(y), y / float(np.median(y)) if by_time else None)