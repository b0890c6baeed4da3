"""CostGate: the draft budget from the engine's own step times, learned while it serves.

Why: whether a drafted token pays depends on the engine it is verified in (its kernels, its
batch, its hardware), and a threshold measured elsewhere is wrong there. On vLLM's CPU build a
step that verifies drafts costs several times a plain step, so speculation is a tax from the first
request; on a GPU the same drafts are nearly free until the batch saturates compute. A drafter
called once per step can see everything needed to decide: the wall time between its calls (one
engine step), the rows in the batch, the tokens it drafted into that step, and how many of them
the engine accepted. :class:`CostGate` fits

    step_seconds ~ a + b * rows + d * [any drafts] + c * drafted_tokens

by exponentially weighted least squares (recent steps count most, so the fit follows the load),
tracks per draft depth ``i`` the share of rows whose chain reaches ``i`` (``f_i``) and the chance a
token at depth ``i`` is accepted (``q_i``, i.e. its whole prefix accepted too), and each step picks
the budget ``j`` maximising the batch's emitted tokens per second

    rate(j) = rows * (1 + sum_{i<=j} f_i q_i) / (a + b rows + [j>0] (d + c rows sum_{i<=j} f_i))

``j = 0`` is plain decoding, so under the fit the gate never does worse than off. Within the
chosen budget a drafted token of acceptance probability ``p`` adds ``p`` expected tokens and ``c``
seconds, so it raises the rate only if ``p > c * rate(j)``: :meth:`floor` is that bar, for drafters
whose chains carry calibrated per-token probabilities (the suffix proposer's match-length
calibration) to cut each row's chain where its tokens stop paying. The fit needs
the budgets it compares observed: while warming up (``min_fitted`` fitted steps, a few seconds of
serving) three steps in four decode plainly and the fourth drafts with the next budget of 1..k,
cautious because drafting where it is a tax costs more than not drafting where it pays; after
that plain decoding and the two budgets beside the chosen one are tried again, each after
``explore_every * r**2`` steps where ``r`` is how many times faster the chosen budget is
predicted to be (at most 16x). Exploring a budget that is far worse
is rare, so its cost stays small, and the fit of the budgets not chosen stays fresh. Steps whose
time mixes in other work (a prefill, a request's first step, an idle gap) are not fitted: the
caller says so with ``fit=False``.

Use (one per drafter; numbers are per engine step)::

    gate = CostGate(k=4)
    j = gate.budget(rows)                       # before drafting
    floor = gate.floor(rows, j)                 # optional: per-token probability bar
    ...                                         # draft chains of at most j tokens (cut below floor)
    gate.step(seconds, rows, j, drafted, accepted, fit=...)   # after the engine's next step
"""

from __future__ import annotations

import numpy as np

# features of one step: intercept, rows, any drafts, drafted tokens
_NFEAT = 4


class CostGate:
    """Online step-cost fit + per-depth acceptance -> budget per step (see the module docstring).

    Args:
        k: the largest budget (the engine's num_speculative_tokens).
        decay: weight kept by older steps at each new one (0.995: a window of about 200 steps).
        explore_every: steps between tries of a budget not chosen (scaled by how much worse it is
            predicted to be).
        min_fitted: fitted steps needed, with drafting and plain ones among them, before the fit
            is trusted; until then three steps in four are plain and the fourth cycles through 1..k.
        prior_steps: pseudo-observations behind each depth's acceptance (a prior of 0.5), so a
            depth seen a few times does not swing the budget.
    """

    def __init__(self, k: int, *, decay: float = 0.995, explore_every: int = 32, min_fitted: int = 32,
                 prior_steps: float = 2.0):
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"CostGate k must be an int >= 1, got {k!r}")
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"CostGate decay must be in (0, 1], got {decay}")
        if not isinstance(explore_every, int) or explore_every < 2:
            raise ValueError(f"CostGate explore_every must be an int >= 2, got {explore_every!r}")
        if min_fitted < _NFEAT or prior_steps < 0:
            raise ValueError(f"CostGate min_fitted must be >= {_NFEAT} and prior_steps >= 0, got "
                             f"{min_fitted}, {prior_steps}")
        self.k, self.decay, self.explore_every = k, decay, explore_every
        self.min_fitted, self.prior_steps = min_fitted, prior_steps
        self._xtx = np.zeros((_NFEAT, _NFEAT))
        self._xty = np.zeros(_NFEAT)
        self._fitted = self._plain = self._drafting = 0
        self._reach = np.zeros(k)   # [k] decayed count of rows whose chain reached depth i+1
        self._rows = np.zeros(k)    # [k] decayed count of rows offered a budget >= i+1
        self._hit = np.zeros(k)     # [k] decayed count of depth-(i+1) tokens accepted
        self._steps = 0
        self._cycle = 0
        self._seen = np.zeros(k + 1)  # [k + 1] step at which each budget was last used
        self._depth = np.arange(1, k + 1)[:, None]  # [k, 1] draft depths 1..k
        self.last_reason = "warming up"

    # ------------------------------------------------------------------ learning
    def step(self, seconds: float, rows: int, budget: int, drafted, accepted, *, fit: bool) -> None:
        """One engine step that verified the drafts of the last :meth:`budget` call.

        Args:
            seconds: wall time of the step (between two drafter calls).
            rows: rows the step ran.
            budget: the budget those drafts were made with.
            drafted / accepted: ``[rows]`` per-row chain lengths drafted into the step and how many
                of each the engine accepted (an accepted token's prefix is accepted too).
            fit: whether ``seconds`` is a plain decode step of these rows (no prefill, no gap).
        """
        drafted = np.asarray(drafted, dtype=np.int64)
        accepted = np.asarray(accepted, dtype=np.int64)
        if drafted.shape != accepted.shape or (accepted > drafted).any() or (accepted < 0).any():
            raise ValueError("CostGate.step needs 0 <= accepted <= drafted, row by row, in arrays of one shape")
        if budget > 0 and drafted.size:
            depth = self._depth                                       # [k, 1]
            offered = depth <= budget                                 # [k, 1]
            self._rows = self._rows * self.decay + offered[:, 0] * drafted.size
            self._reach = self._reach * self.decay + ((drafted[None, :] >= depth) & offered).sum(1)
            self._hit = self._hit * self.decay + ((accepted[None, :] >= depth) & offered).sum(1)
        if not fit or not np.isfinite(seconds) or seconds <= 0 or rows < 1:
            return
        total = int(drafted.sum())
        x = np.array([1.0, float(rows), float(total > 0), float(total)])
        self._xtx = self._xtx * self.decay + np.outer(x, x)
        self._xty = self._xty * self.decay + x * seconds
        self._fitted += 1
        self._plain += total == 0
        self._drafting += total > 0

    # ------------------------------------------------------------------ estimates
    def coefficients(self) -> np.ndarray | None:
        """``[a, b, d, c]`` of the step-time fit (seconds), None until trusted.

        The least-squares fit under ``d, c >= 0``: the best of the fits with both, one or neither
        of them free, among those that keep them non-negative. Why not clamp the free fit: when
        nearly every step drafts, the intercept and ``d`` are almost collinear, and zeroing a
        negative ``d`` without refitting leaves its share in ``a`` (a plain step fitted 20% long).
        """
        if self._fitted < self.min_fitted or self._plain < 2 or self._drafting < 2:
            return None
        xtx = self._xtx + 1e-9 * np.trace(self._xtx) * np.eye(_NFEAT)
        best, best_gain = None, -np.inf
        for free in ([0, 1, 2, 3], [0, 1, 3], [0, 1, 2], [0, 1]):
            theta = np.zeros(_NFEAT)
            theta[free] = np.linalg.solve(xtx[np.ix_(free, free)], self._xty[free])
            # On a face's optimum the squared error is sum(y^2) - theta . X'y: the largest gain wins.
            if theta[2] >= 0.0 and theta[3] >= 0.0 and (gain := float(theta @ self._xty)) > best_gain:
                best, best_gain = theta, gain
        return best

    def depth_acceptance(self) -> tuple[np.ndarray, np.ndarray]:
        """``(f [k], q [k])``: share of rows whose chain reaches each depth, and the chance a token
        there is accepted (both shrunk toward 0.5 by ``prior_steps``)."""
        p = self.prior_steps
        f = (self._reach + 0.5 * p) / (self._rows + p)
        q = (self._hit + 0.5 * p) / (self._reach + p)
        return f, q

    def rates(self, rows: int) -> np.ndarray | None:
        """``[k + 1]`` predicted emitted tokens per second at budgets 0..k, None until trusted."""
        theta = self.coefficients()
        return None if theta is None else self._rates(theta, rows)

    def _rates(self, theta: np.ndarray, rows: int) -> np.ndarray:
        a, b, d, c = theta
        f, q = self.depth_acceptance()
        drafted = np.concatenate([[0.0], np.cumsum(f)])               # [k + 1] tokens per row
        gained = np.concatenate([[0.0], np.cumsum(f * q)])            # [k + 1] accepted per row
        seconds = a + b * rows + (drafted > 0) * (d + c * rows * drafted)
        return rows * (1.0 + gained) / np.maximum(seconds, 1e-9)

    def floor(self, rows: int, budget: int) -> float:
        """The acceptance probability below which one more drafted token lowers the predicted rate
        at ``budget``: ``c * rate(budget)`` (0 until the fit is trusted, and for budget 0)."""
        theta = self.coefficients() if budget > 0 else None
        if theta is None:
            return 0.0
        return float(min(1.0, theta[3] * self._rates(theta, max(1, rows))[min(budget, self.k)]))

    # ------------------------------------------------------------------ deciding
    def budget(self, rows: int) -> int:
        """This step's draft budget in ``0..k`` (the reason is kept in ``last_reason``)."""
        self._steps += 1
        rates = self.rates(max(1, rows))
        if rates is None:
            # Warming up: plain steps, with every fourth step drafting at the next budget of 1..k.
            # Cautious on purpose: drafting where it is a tax can cost several plain steps, while not
            # drafting where it pays loses at most the speculation gain.
            if self._steps % 4:
                return self._use(0, "warming up: plain")
            self._cycle = self._cycle % self.k + 1
            return self._use(self._cycle, f"warming up: budget {self._cycle}")
        j = int(np.argmax(rates))
        # Explore plain decoding and the neighbouring budgets, each less often the worse it is
        # predicted to be: a budget at 1/r of the best rate waits explore_every * r^2 steps (at most 16x).
        due = []
        for e in {0, j - 1, j + 1} - {j}:
            if 0 <= e <= self.k:
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
