"""Whether a hybrid's model part is worth drafting this step, learned in hindsight.

:class:`ModelGate` decides per request and step, before the model (an EAGLE layer) drafts, by
comparing two numbers in emitted tokens:

* **gain**: at each commit where the model drafted, the merged tree's accepted depth minus the
  lookup paths' own (negative when the model's nodes pushed accepted lookup nodes out), as a
  running mean per *bucket* of the lookup's expected acceptance at propose time, plus the
  request's own residual shrunk by ``request_prior`` pseudo-observations;
* **cost**: the model's drafting seconds per request plus the verify seconds of its kept nodes,
  over the seconds of one step, times the tokens the batch emits per step.

The model drafts unless its bucket has ``min_samples`` observations and the gain is below the
cost; a skipped request still drafts every ``explore_every``-th decision in a bucket.

A :class:`~specdec.control.interface.DraftController` in tree nodes: :meth:`decide` reads
``BatchView.req_ids`` and ``BatchView.hints`` (each request's lookup expectation) and gives each
request ``BatchView.cap`` nodes or 0. Exactness does not depend on it: it only chooses which
deterministic nodes are offered. The variants measured and not kept: docs/design-notes.md.
"""

from __future__ import annotations

import bisect
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable

from ..estimate.calibration import RunningMean
from .interface import BatchView, Decision, Outcome


@dataclass
class ModelGate:
    """Per-step draft/skip decisions for a hybrid's model part (see the module docstring).

    Attributes:
        edges: bucket edges on the lookup's expected accepted tokens (strictly increasing).
        min_samples: observations a bucket needs before it may skip.
        explore_every: a skipping bucket still drafts on every this-many-th decision.
        weight: floor of the running means' step size.
        request_prior: pseudo-observations a request's residual is shrunk by (``math.inf``: bucket only).
        clock: seconds (``time.perf_counter``; tests pass a fake).
    """

    unit = "nodes"

    edges: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    min_samples: int = 4
    explore_every: int = 8
    weight: float = 0.05
    request_prior: float = 4.0
    clock: Callable[[], float] = time.perf_counter
    drafted: int = 0
    skipped: int = 0
    _model: RunningMean = field(default_factory=RunningMean)  # drafting seconds per request (the first one is warm-up)
    _verify: RunningMean = field(default_factory=RunningMean)  # verify seconds of the model's kept nodes
    _period: RunningMean = field(default_factory=RunningMean)  # seconds between propose calls
    _warm: bool = False
    _last_call: float | None = None
    _tokens: dict[Hashable, RunningMean] = field(default_factory=dict)  # req_id -> tokens emitted per step
    _gain: list[RunningMean] = field(default_factory=list)  # [bucket] hindsight gain, tokens
    _residual: dict[Hashable, RunningMean] = field(default_factory=dict)  # req_id -> gain less its bucket's mean
    _skips: dict[tuple[Hashable, int], int] = field(default_factory=dict)  # (req_id, bucket) -> skips since a draft

    def __post_init__(self):
        if any(b <= a for a, b in zip(self.edges, self.edges[1:])):
            raise ValueError(f"ModelGate edges must be strictly increasing, got {self.edges}")
        if self.min_samples < 1 or self.explore_every < 1 or not 0 < self.weight <= 1 or not self.request_prior >= 0:
            raise ValueError("ModelGate needs min_samples >= 1, explore_every >= 1, weight in (0, 1] "
                             "and request_prior >= 0")
        self._gain = [RunningMean() for _ in range(len(self.edges) + 1)]

    @property
    def gain(self) -> list[float]:
        """Mean hindsight gain per bucket, in tokens (0 where nothing was observed)."""
        return [0.0 if m.value is None else m.value for m in self._gain]

    @property
    def samples(self) -> list[int]:
        """Observations per bucket."""
        return [m.n for m in self._gain]

    @property
    def model_seconds(self) -> float | None:
        """Mean drafting seconds per request (None until measured)."""
        return self._model.value

    @property
    def verify_seconds(self) -> float:
        """Mean verify seconds of the model's kept nodes per drafted request (0 until observed)."""
        return self._verify.value or 0.0

    @property
    def period(self) -> float | None:
        """Mean seconds between propose calls (None until two calls)."""
        return self._period.value

    @property
    def max_budget(self) -> int:
        """No bound of its own: it gives a request the cap it is given, or nothing."""
        return sys.maxsize

    def reset(self) -> None:
        """Forget everything learnt (a new run)."""
        fresh = ModelGate(self.edges, self.min_samples, self.explore_every, self.weight, self.request_prior,
                          clock=self.clock)
        self.__dict__.update(fresh.__dict__)

    def decide(self, batch: BatchView) -> Decision:
        """A step begins: per request of ``batch.req_ids``, ``batch.cap`` model nodes if the model is
        worth drafting for it (its lookup expectation ``batch.hints[req_id]`` picks the bucket), else 0."""
        self._step_started()
        batch_tokens = self.batch_tokens(batch.req_ids)
        cap = batch.cap or 0
        per = tuple(cap if cap > 0 and self._should_draft(self.bucket(batch.hints.get(r, 0.0)), batch_tokens, r) else 0
                    for r in batch.req_ids)
        return Decision(max(per, default=0), per_request=per, reason=f"model drafts for {sum(b > 0 for b in per)} "
                                                                     f"of {len(per)} requests")

    def observe(self, outcome: Outcome) -> None:
        """Commits (``details``: request id -> ``(bucket or None, gain or None, emitted tokens)``) and
        measured times (``timings``: ``model`` drafting seconds of one request, ``verify`` seconds of
        its kept nodes). A negative verify time raises ValueError."""
        for req_id, (bucket, gain, emitted) in outcome.details.items():
            self._observe_commit(req_id, bucket, gain, emitted)
        if "model" in outcome.timings:
            self._observe_model_time(outcome.timings["model"])
        if "verify" in outcome.timings:
            self._observe_verify_time(outcome.timings["verify"])

    def bucket(self, expected: float) -> int:
        """The bucket of a lookup draft whose calibrated estimates sum to ``expected``."""
        return bisect.bisect_right(self.edges, expected)

    def _step_started(self) -> None:
        """A propose call began: the time since the previous one is one step (clipped to twice the mean)."""
        now = self.clock()
        if self._last_call is not None:
            gap = now - self._last_call
            # A gap spanning a prefill or an idle engine is not a step: clipped to twice the mean,
            # so it cannot inflate the period (and hide the model's cost), while a real rise
            # (a larger batch) still doubles it within a few steps.
            self._period.add(gap if self.period is None else min(gap, 2 * self.period), self.weight)
        self._last_call = now

    def batch_tokens(self, req_ids) -> float:
        """Tokens the requests of a step emit per step, by their running means (1 before any)."""
        return sum(1.0 if self._tokens.get(r) is None else self._tokens[r].value for r in req_ids)

    def cost_tokens(self, batch_tokens: float) -> float | None:
        """One request's model price in tokens of a step that emits ``batch_tokens``; None before the
        drafting time is known."""
        if self.model_seconds is None or not self.period:
            return None
        return (self.model_seconds + self.verify_seconds) / self.period * batch_tokens

    def expected_gain(self, bucket: int, req_id: Hashable = None) -> float | None:
        """Tokens the model is expected to add for ``req_id`` in ``bucket`` (bucket mean plus shrunk
        residual); None before the bucket has ``min_samples``."""
        mean = self._gain[bucket]
        if mean.n < self.min_samples:
            return None
        own = self._residual.get(req_id)
        if own is None:
            return mean.value
        return mean.value + own.n / (own.n + self.request_prior) * own.value

    def _should_draft(self, bucket: int, batch_tokens: float, req_id: Hashable = None) -> bool:
        """Draft the model for ``req_id`` in ``bucket`` now? (Counts the decision.)"""
        cost = self.cost_tokens(batch_tokens)
        expected = self.expected_gain(bucket, req_id)
        worth = cost is None or expected is None or expected >= cost
        key = (req_id, bucket)
        explore = not worth and self._skips.get(key, 0) + 1 >= self.explore_every
        if worth or explore:
            self._skips.pop(key, None)
            self.drafted += 1
            return True
        self._skips[key] = self._skips.get(key, 0) + 1
        self.skipped += 1
        return False

    def _observe_model_time(self, seconds: float) -> None:
        """One request's drafting time; the first (a cold forward) is dropped."""
        if self._warm:
            self._model.add(seconds, self.weight)
        self._warm = True

    def _observe_verify_time(self, seconds: float) -> None:
        """Verify seconds the decoder spent on the model's kept nodes in one drafted request's step."""
        if not seconds >= 0:
            raise ValueError(f"verify time must be >= 0 s, got {seconds}")
        self._verify.add(seconds, self.weight)

    def _observe_commit(self, req_id: Hashable, bucket: int | None, gain: float | None, emitted: int) -> None:
        """One commit: ``emitted`` tokens; ``gain`` (tokens) when the model drafted this step."""
        self._tokens.setdefault(req_id, RunningMean()).add(float(emitted), self.weight)
        if bucket is not None and gain is not None:
            mean = self._gain[bucket]
            # A residual against a mean of fewer than min_samples gains would be mostly that mean's own
            # noise, and it would stay in the request's residual long after the bucket settled.
            if mean.n >= self.min_samples:
                self._residual.setdefault(req_id, RunningMean()).add(gain - mean.value, self.weight)
            mean.add(gain, self.weight)

    def end(self, req_id: Hashable) -> None:
        self._tokens.pop(req_id, None)
        self._residual.pop(req_id, None)
        for key in [k for k in self._skips if k[0] == req_id]:
            del self._skips[key]
