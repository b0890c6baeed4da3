"""CostGate: the draft budget from the engine's own step times, learned while it serves.

Whether a drafted token pays depends on the engine that verifies it, so a threshold measured
elsewhere is wrong there. A drafter called once per step sees the wall time between calls (one
step), the rows, and each row's drafted and accepted tokens. :class:`CostGate` fits

    step_seconds ~ a + b * rows + e * prefill_rows + d * [any drafts] + c * drafted_tokens

by exponentially weighted non-negative least squares in relative error (step times span 10x and
more, noise grows with them: in absolute error the longest steps outvote the rest), tracks per
depth ``i`` the share of rows whose chain reaches it (``f_i``) and the chance a token there is
accepted (``q_i``), and picks the budget ``j`` maximising

    rate(j) = rows * (1 + sum_{i<=j} f_i q_i) / (a + b rows + [j>0] (d + c rows sum_{i<=j} f_i))

``j = 0`` is plain decoding, so under the fit it never does worse than off. Prefill is fitted (so
it biases no other weight) but left out of the rate: a request's prefill costs the same whether the
steps around it draft or not, and fewer decode steps do not make less of it, so pricing drafts
against a step padded with prefill would make them look cheaper than they are.

A token of acceptance probability ``p`` raises the rate only if ``p > c * rate(j)``: the floor.
Warm-up, exploration and the outlier rule: docs/vllm.md ("The cost gate").

A :class:`~specdec.control.interface.DraftController` in chain tokens, one per drafter::

    gate = CostGate(k=4)
    d = gate.decide(BatchView(rows))            # before drafting: d.budget, d.floor
    ...                                         # draft chains of at most d.budget tokens, cut below d.floor
    gate.observe(Outcome.of(drafted, accepted, budget=d.budget, seconds=..., fit=..., offered=..., prefill=...))
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..estimate.fit import nonnegative_lstsq_gram
from .interface import BatchView, Decision, Outcome

# features of one step: intercept, rows, prefill rows, any drafts, drafted tokens
_NFEAT = 5
_A, _B, _E, _D, _C = range(_NFEAT)
_PREFILL_WEIGHT = 0.2  # weight of a step that carried prefill work, against 1 for a decode-only step


class CostGate:
    """Online step-cost fit + per-depth acceptance -> budget per step (see the module docstring).

    Args:
        k: the largest budget (the engine's num_speculative_tokens).
        decay: weight kept by older steps at each new one (0.995: a window of about 200 steps).
        explore_every: steps between tries of plain decoding and the budgets beside the chosen one,
            times ``r**2`` (at most 16x) for a budget predicted ``r`` times slower.
        min_fitted: fitted steps (drafting and plain among them) before the fit is trusted; until
            then three steps in four are plain and the fourth cycles through budgets 1..k.
        prior_steps: pseudo-observations (of 0.5) behind each depth's acceptance.
        outlier_ratio / max_outliers: a step slower than ``outlier_ratio`` x its prediction (an idle
            gap between calls) is not fitted; the (``max_outliers`` + 1)-th in a row restarts the fit.
            Each step weighs 1 / seconds^2 (relative error); steps with prefill rows a fifth of that.
    """

    unit = "tokens"

    def __init__(self, k: int, *, decay: float = 0.995, explore_every: int = 32, min_fitted: int = 32,
                 prior_steps: float = 2.0, outlier_ratio: float = 8.0, max_outliers: int = 8):
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"CostGate k must be an int >= 1, got {k!r}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"CostGate decay must be in (0, 1], got {decay}")
        if not isinstance(explore_every, int) or explore_every < 2:
            raise ValueError(f"CostGate explore_every must be an int >= 2, got {explore_every!r}")
        if min_fitted < 4 or prior_steps < 0:
            raise ValueError(f"CostGate min_fitted must be >= 4 and prior_steps >= 0, got {min_fitted}, {prior_steps}")
        if not outlier_ratio > 1.0 or not isinstance(max_outliers, int) or max_outliers < 0:
            raise ValueError(f"CostGate outlier_ratio must be > 1 and max_outliers an int >= 0, got {outlier_ratio}, "
                             f"{max_outliers!r}")
        self.k, self.decay, self.explore_every = k, decay, explore_every
        self.min_fitted, self.prior_steps = min_fitted, prior_steps
        self.outlier_ratio, self.max_outliers = float(outlier_ratio), max_outliers
        self.reset()

    @property
    def max_budget(self) -> int:
        return self.k

    def reset(self) -> None:
        """Forget the fit and the acceptance evidence (a new engine, or a new run)."""
        k = self.k
        self._restart_fit()
        self.outliers = 0       # steps set aside in all
        self._reach = np.zeros(k)   # [k] decayed count of rows whose chain reached depth i+1
        self._rows = np.zeros(k)    # [k] decayed count of rows offered a budget >= i+1
        self._hit = np.zeros(k)     # [k] decayed count of depth-(i+1) tokens accepted
        self._steps = 0
        self._cycle = 0
        self._seen = np.zeros(k + 1)  # [k + 1] step at which each budget was last used
        self._depth = np.arange(1, k + 1)[:, None]  # [k, 1] draft depths 1..k
        self.last_reason = "warming up"

    def _restart_fit(self) -> None:
        """Forget the step-cost fit alone (the engine changed; acceptance is the drafter's and stays)."""
        self._xtx = np.zeros((_NFEAT, _NFEAT))
        self._xty = np.zeros(_NFEAT)
        self._fitted = self._plain = self._drafting = 0
        self._theta: np.ndarray | None = None  # the fit, recomputed after each fitted step
        self._stale = False
        self._recent: deque[float] = deque(maxlen=32)  # seconds per verified token of recent fitted steps
        self._outliers = 0      # steps set aside in a row

    # ------------------------------------------------------------------ learning
    def observe(self, outcome: Outcome) -> None:
        """One engine step that verified the drafts of the last :meth:`decide` (``outcome.budget``):
        ``drafted`` / ``accepted`` per row, ``offered`` (rows that could draft; only they count for
        acceptance), and, when ``seconds`` is measured and ``fit``, the step's time with its ``prefill``
        rows. ValueError when ``offered`` is not shaped like ``drafted``."""
        drafted, accepted, budget, prefill = outcome.drafted, outcome.accepted, outcome.budget, outcome.prefill
        rows = int(drafted.size)
        seconds = float("nan") if outcome.seconds is None else float(outcome.seconds)
        mask = np.ones(drafted.shape, dtype=bool) if outcome.offered is None else np.asarray(outcome.offered, bool)
        if mask.shape != drafted.shape:
            raise ValueError(f"CostGate.observe: offered must be [rows] like drafted, got {mask.shape}")
        if budget > 0 and mask.any():
            depth = self._depth                                       # [k, 1]
            within = depth <= budget                                  # [k, 1]
            d, a = drafted[mask], accepted[mask]                      # [offered rows]
            self._rows = self._rows * self.decay + within[:, 0] * d.size
            self._reach = self._reach * self.decay + ((d[None, :] >= depth) & within).sum(1)
            self._hit = self._hit * self.decay + ((a[None, :] >= depth) & within).sum(1)
        if not outcome.fit or not np.isfinite(seconds) or seconds <= 0 or rows < 1:
            return
        total = int(drafted.sum())
        x = np.zeros(_NFEAT)
        x[[_A, _B, _E, _D, _C]] = 1.0, float(rows), float(prefill), float(total > 0), float(total)
        if self._is_outlier(seconds, x):
            return
        self._recent.append(seconds / (rows + total))
        # Relative error: each step weighs 1 / seconds^2. A prefill's cost varies with its prompt, so
        # such steps are noisier still: they count a fifth of that.
        w = (1.0 if prefill == 0 else _PREFILL_WEIGHT) / seconds ** 2
        self._xtx = self._xtx * self.decay + w * np.outer(x, x)
        self._xty = self._xty * self.decay + w * x * seconds
        self._fitted += 1
        self._plain += total == 0
        self._drafting += total > 0
        self._stale = True

    def _is_outlier(self, seconds: float, x: np.ndarray) -> bool:
        """Whether to set this step aside: far slower than predicted, and not the (max_outliers + 1)-th in a row."""
        theta = self._coefficients()
        if theta is not None:
            expected = float(x @ theta)
        elif len(self._recent) >= 8:
            # Before the fit: the recent step per row, times the tokens each row verifies (a step that
            # verifies 1 + t tokens a row costs at most 1 + t plain steps).
            expected = float(np.median(self._recent)) * (x[_B] + x[_C])
        else:
            return False
        if seconds <= self.outlier_ratio * expected:
            self._outliers = 0
            return False
        if self._outliers >= self.max_outliers:
            # Slow for too long: the engine changed. Its old steps would outweigh the new ones for
            # hundreds of steps (a step weighs 1 / seconds^2), so the fit starts over from this one.
            self._restart_fit()
            return False
        self._outliers += 1
        self.outliers += 1
        return True

    # ------------------------------------------------------------------ estimates
    def _coefficients(self) -> np.ndarray | None:
        """All five weights ``[a, b, e, d, c]`` (>= 0), None until trusted or while they predict nothing."""
        if self._fitted < self.min_fitted or self._plain < 2 or self._drafting < 2:
            return None
        if self._stale:
            self._theta = nonnegative_lstsq_gram(self._xtx, self._xty)
            self._stale = False
        return self._theta if self._theta[_A] + self._theta[_B] > 0 else None

    def coefficients(self) -> np.ndarray | None:
        """``[a, b, d, c]`` of the decode-step fit (seconds, each >= 0), None until trusted."""
        theta = self._coefficients()
        return None if theta is None else theta[[_A, _B, _D, _C]]

    def prefill_seconds(self) -> float | None:
        """``e``: the fit's seconds per prefilling row of a step, None until trusted."""
        theta = self._coefficients()
        return None if theta is None else float(theta[_E])

    def depth_acceptance(self) -> tuple[np.ndarray, np.ndarray]:
        """``(f [k], q [k])``: share of offered rows whose chain reaches each depth, and the chance a
        token there is accepted (both shrunk toward 0.5 by ``prior_steps``)."""
        p = self.prior_steps
        f = (self._reach + 0.5 * p) / (self._rows + p)
        q = (self._hit + 0.5 * p) / (self._reach + p)
        return f, q

    def rates(self, rows: int) -> np.ndarray | None:
        """``[k + 1]`` predicted emitted tokens per second at budgets 0..k, None until trusted."""
        theta = self._coefficients()
        return None if theta is None else self._rates(theta, rows)

    def _rates(self, theta: np.ndarray, rows: int) -> np.ndarray:
        f, q = self.depth_acceptance()
        drafted = np.concatenate([[0.0], np.cumsum(f)])               # [k + 1] tokens per row
        gained = np.concatenate([[0.0], np.cumsum(f * q)])            # [k + 1] accepted per row
        base = theta[_A] + theta[_B] * rows
        seconds = base + (drafted > 0) * (theta[_D] + theta[_C] * rows * drafted)
        return rows * (1.0 + gained) / seconds

    def _floor(self, rows: int, budget: int) -> float:
        """The acceptance probability below which one more drafted token lowers the predicted rate
        at ``budget``: ``c * rate(budget)`` (0 until the fit is trusted, and for budget 0)."""
        theta = self._coefficients() if budget > 0 else None
        if theta is None:
            return 0.0
        return float(min(1.0, theta[_C] * self._rates(theta, max(1, rows))[min(budget, self.k)]))

    # ------------------------------------------------------------------ deciding
    def decide(self, batch: BatchView) -> Decision:
        """This step's budget in ``0..min(k, batch.cap)`` and its floor: the acceptance probability a
        drafted token needs to pay for its verify time (:meth:`_floor`; chains are cut below it)."""
        rows = max(1, batch.rows)
        j = self._budget(rows, batch.cap)
        return Decision(j, floor=self._floor(rows, j), reason=self.last_reason)

    def _budget(self, rows: int, cap: int | None) -> int:
        self._steps += 1
        top = self.k if cap is None else max(0, min(int(cap), self.k))
        if top == 0:
            return self._use(0, "capped at 0")
        rates = self.rates(max(1, rows))
        rates = None if rates is None else rates[: top + 1]
        if rates is None:
            # Warming up: plain steps, with every fourth step drafting at the next budget of 1..k.
            # Cautious on purpose: drafting where it is a tax can cost several plain steps, while not
            # drafting where it pays loses at most the speculation gain.
            if self._steps % 4:
                return self._use(0, "warming up: plain")
            self._cycle = self._cycle % self.k + 1
            j = min(self._cycle, top)
            return self._use(j, f"warming up: budget {j}")
        j = int(np.argmax(rates))
        # Explore plain decoding and the neighbouring budgets, each less often the worse it is
        # predicted to be: a budget at 1/r of the best rate waits explore_every * r^2 steps (at most 16x).
        due = []
        for e in {0, j - 1, j + 1} - {j}:
            if 0 <= e <= top:
                wait = self.explore_every * min(16.0, (rates[j] / max(rates[e], 1e-12)) ** 2)
                if self._steps - self._seen[e] >= wait:
                    due.append((self._steps - self._seen[e] - wait, e))
        if due:
            e = max(due)[1]
            return self._use(e, f"exploring budget {e} ({rates[e]:.1f} vs best {rates[j]:.1f} tok/s predicted)")
        return self._use(j, f"budget {j} at {rows} rows: {rates[j]:.1f} vs plain {rates[0]:.1f} tok/s predicted")

    def _use(self, j: int, reason: str) -> int:
        self._seen[j] = self._steps
        self.last_reason = reason
        return j
