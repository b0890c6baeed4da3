"""The one fitting routine of specdec's cost models: least squares with non-negative weights.

Cost models predict seconds as a weighted sum of work terms, none of which can make a step faster, so
weights are >= 0. :func:`nonnegative_lstsq_gram` solves ``argmin_{w >= 0} w' G w - 2 w' h`` from
``G = X' W X`` and ``h = X' W y`` (what an online fit keeps) by Lawson-Hanson;
:func:`nonnegative_lstsq` does it from rows ``X [n, p]`` and ``y [n]``.
"""

from __future__ import annotations

import numpy as np


def nonnegative_lstsq_gram(gram: np.ndarray, moment: np.ndarray, *, ridge: float = 1e-9) -> np.ndarray:
    """``w [p] >= 0`` minimising ``w' G w - 2 w' h`` (``G [p, p]`` PSD); ``ridge`` (relative to
    ``trace(G)``) gives a never-seen term weight 0; columns are rescaled to unit diagonal."""
    gram = np.asarray(gram, dtype=np.float64)
    moment = np.asarray(moment, dtype=np.float64)
    p = moment.shape[0]
    if gram.shape != (p, p):
        raise ValueError(f"gram must be [{p}, {p}] for a moment of {p} terms, got {gram.shape}")
    scale = np.sqrt(np.maximum(np.diag(gram), 0.0))
    scale[scale == 0] = 1.0
    g = gram / np.outer(scale, scale)
    g = g + ridge * max(float(np.trace(g)), 1.0) * np.eye(p)
    h = moment / scale
    free = np.zeros(p, dtype=bool)
    w = np.zeros(p)
    for _ in range(3 * p + 3):
        grad = h - g @ w  # the negative gradient / 2: > 0 where raising w_j lowers the error
        grad[free] = -np.inf
        j = int(np.argmax(grad))
        if grad[j] <= 1e-12 * max(1.0, float(np.abs(h).max())):
            break
        free[j] = True
        while True:
            z = np.zeros(p)
            z[free] = np.linalg.solve(g[np.ix_(free, free)], h[free])
            if (z[free] > 0).all():
                w = z
                break
            # Step from w toward z until the first free weight reaches 0, and fix it there.
            blocked = free & (z <= 0)
            alpha = float(np.min(w[blocked] / np.maximum(w[blocked] - z[blocked], 1e-300)))
            w = w + alpha * (z - w)
            free &= w > 1e-15
            w[~free] = 0.0
    return w / scale


def nonnegative_lstsq(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """``w [p] >= 0`` minimising ``sum_i weights_i (x_i . w - y_i)^2`` for ``x [n, p]``, ``y [n]``."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"x must be [n, p] and y [n], got {x.shape} and {y.shape}")
    wx = x if weights is None else x * np.asarray(weights, dtype=np.float64)[:, None]
    return nonnegative_lstsq_gram(wx.T @ x, wx.T @ y)
