"""LoadGate: the per-step "speculate or not, and how much" decision, usable in any serving loop.

Near saturation every rejected draft token displaces a real one, so speculation pays at small batch
and is a tax at large. The gate switches it off above a batch size (with hysteresis), can choose
the budget each step from a measured cost model and acceptance (:class:`BudgetOptimizer`), and
stops drafting when recent acceptance collapses. A
:class:`~specdec.control.interface.DraftController` in draft tokens; docs/deciding.md has usage.
"""

from __future__ import annotations

import math

from ..estimate.acceptance import AcceptanceDist
from ..estimate.step_cost import StepCostModel
from .interface import BatchView, Decision, Outcome


class BudgetOptimizer:
    """Chooses the draft budget that maximises expected emitted tokens per second of a batch:
    ``rate(B, k, C) = B * E[tokens per step | k] / (t_target(B, 1 + E[max drafted], C) + B * t_propose(k))``
    with ``t_propose(0) = 0``; ``k = 0`` is plain decoding. ValueError when ``max_budget`` exceeds the
    measured acceptance range."""

    def __init__(self, cost: StepCostModel, acceptance: AcceptanceDist, max_budget: int | None = None):
        self.cost = cost
        self.acceptance = acceptance
        self.max_budget = acceptance.max_budget if max_budget is None else int(max_budget)
        if not 0 <= self.max_budget <= acceptance.max_budget:
            raise ValueError(
                f"BudgetOptimizer max_budget must be in [0, {acceptance.max_budget}] (the measured range), got "
                f"{max_budget}"
            )

    def step_time(self, batch: int, budget: int, context: float) -> float:
        """Expected seconds of one step: verify over the widest draft in the batch + proposer time."""
        width = self.acceptance.expected_max_drafted(budget, batch) if budget > 0 else 0.0
        t = self.cost.step_time(batch, 1 + width, context)
        return t + (batch * self.acceptance.propose_s_per_req if budget > 0 else 0.0)

    def rate(self, batch: int, budget: int, context: float) -> float:
        """Expected emitted tokens per second for the batch at ``budget``."""
        return batch * self.acceptance.expected_tokens(budget) / self.step_time(batch, budget, context)

    def best(self, batch: int, context: float, cap: int | None = None) -> tuple[int, float]:
        """``(budget, tokens/s)`` maximising :meth:`rate` over ``0..min(cap, max_budget)``."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        top = self.max_budget if cap is None else max(0, min(int(cap), self.max_budget))
        rates = [self.rate(batch, k, context) for k in range(top + 1)]
        k = max(range(len(rates)), key=lambda i: (rates[i], -i))
        return k, rates[k]

    def crossover_batch(self, budget: int, context: float, max_batch: int = 4096) -> int:
        """Largest batch size at which drafting ``budget`` tokens still beats plain decoding (0: never)."""
        last = 0
        for b in range(1, max_batch + 1):
            if self.rate(b, budget, context) > self.rate(b, 0, context):
                last = b
            elif last:
                break
        return last


class LoadGate:
    """Stateful per-step gate (see the module docstring).

    Args:
        off_above: stop speculating once the running batch exceeds this (``math.inf``: never).
        on_below: resume once the batch is at or below this (default ``off_above``); ``<= off_above``.
        budget: the fixed draft budget, or the largest with an optimizer.
        optimizer: a :class:`BudgetOptimizer` choosing the budget per step (0: do not speculate).
        min_accept_rate: below this recent acceptance, stop drafting, probing at budget 1 every
            ``probe_every`` steps.
        ema: weight of the newest observation in the acceptance moving average.
        min_observed: drafted tokens needed before the moving average is trusted.
    """

    def __init__(
        self,
        *,
        off_above: float = math.inf,
        on_below: float | None = None,
        budget: int = 4,
        optimizer: BudgetOptimizer | None = None,
        min_accept_rate: float = 0.0,
        ema: float = 0.1,
        probe_every: int = 16,
        min_observed: int = 32,
    ):
        on_below = off_above if on_below is None else on_below
        if not off_above >= 0:
            raise ValueError(f"LoadGate off_above must be >= 0, got {off_above}")
        if not 0 <= on_below <= off_above:
            raise ValueError(f"LoadGate on_below must be in [0, off_above={off_above}], got {on_below}")
        if budget < 0:
            raise ValueError(f"LoadGate budget must be >= 0, got {budget}")
        if not 0.0 <= min_accept_rate <= 1.0:
            raise ValueError(f"LoadGate min_accept_rate must be in [0, 1], got {min_accept_rate}")
        if not 0.0 < ema <= 1.0:
            raise ValueError(f"LoadGate ema must be in (0, 1], got {ema}")
        if probe_every < 1 or min_observed < 0:
            raise ValueError(
                f"LoadGate probe_every must be >= 1 and min_observed >= 0, got {probe_every}, {min_observed}"
            )
        self.off_above, self.on_below, self.budget = off_above, on_below, int(budget)
        self.optimizer, self.min_accept_rate, self.ema = optimizer, min_accept_rate, ema
        self.probe_every, self.min_observed = probe_every, min_observed
        self.reset()

    def reset(self) -> None:
        """Forget load state and acceptance history (start of a new run)."""
        self.on = True
        self.switches = 0
        self._rate: float | None = None
        self._observed = 0
        self._since_probe = 0

    @property
    def accept_rate(self) -> float | None:
        """Moving average of per-token acceptance (accepted / drafted), None until enough was observed."""
        return self._rate if self._observed >= self.min_observed else None

    unit = "tokens"

    @property
    def max_budget(self) -> int:
        """The largest budget it returns (the optimizer's range bounds it when there is one)."""
        return self.budget if self.optimizer is None else min(self.budget, self.optimizer.max_budget)

    def observe(self, outcome: Outcome) -> None:
        """Record one step's drafted and accepted tokens (the moving acceptance reads their sums)."""
        drafted, accepted = int(outcome.drafted.sum()), int(outcome.accepted.sum())
        if drafted == 0:
            return
        r = accepted / drafted
        self._rate = r if self._rate is None else (1 - self.ema) * self._rate + self.ema * r
        self._observed += drafted

    def decide(self, batch: BatchView) -> Decision:
        """Whether to speculate this step, and the per-request draft budget (at most ``batch.cap``)."""
        batch_size, context = batch.rows, batch.context
        top = self.budget if batch.cap is None else min(self.budget, batch.cap)
        if self.on and batch_size > self.off_above:
            self.on, self.switches = False, self.switches + 1
        elif not self.on and batch_size <= self.on_below:
            self.on, self.switches = True, self.switches + 1
        if not self.on:
            return Decision(0, reason=f"batch {batch_size} above gate (off above {self.off_above}, on at <= "
                                      f"{self.on_below})")
        if batch_size == 0:
            return Decision(0, reason="empty batch")
        rate = self.accept_rate
        if rate is not None and rate < self.min_accept_rate:
            self._since_probe += 1
            if self._since_probe >= self.probe_every:
                self._since_probe = 0
                return Decision(min(1, top), reason=f"probing: acceptance {rate:.2f} below floor "
                                                    f"{self.min_accept_rate:.2f}")
            return Decision(0, reason=f"acceptance {rate:.2f} below floor {self.min_accept_rate:.2f}")
        if self.optimizer is None:
            return Decision(top, reason="load below gate")
        k, _ = self.optimizer.best(batch_size, context, top)
        return Decision(k, reason=f"optimal budget {k} at batch {batch_size}")
