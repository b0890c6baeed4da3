"""Per-request speculative-decoding metrics.

Two rates, and only these two names, everywhere in specdec (tables, reports, manifests):

* ``tokens_per_step`` -- tokens emitted per verify step, the bonus/recovery token included
  (Spec-Bench's mean accepted tokens, tau);
* ``accepted_drafts_per_step`` -- draft tokens accepted per verify step (``tokens_per_step - 1``
  when no step was cut short).

Only emitted tokens count: a step whose accepted drafts ran past ``max_new_tokens`` or a stop token
counts the drafts it emitted, not the ones it verified (the decoder also stops drafting deeper than
the tokens left to generate). Times are wall-clock seconds of the batch step the request took part
in (a batched verify serves every active request at once, so each request is charged the whole
step: what its latency saw).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field


@dataclass
class RequestMetrics:
    """What one request's decoding cost and gained.

    Attributes:
        steps: verify forwards the request took part in (the prefill is not a step).
        tokens: tokens emitted (the first, from the prefill, included).
        drafted: draft nodes verified, summed over steps.
        accepted_hist: ``accepted_hist[k]`` = steps that emitted exactly ``k`` accepted draft tokens.
        prefill_s / propose_s / verify_s / accept_s: seconds in each phase.
    """

    steps: int = 0
    tokens: int = 0
    drafted: int = 0
    accepted_hist: list[int] = field(default_factory=list)
    prefill_s: float = 0.0
    propose_s: float = 0.0
    verify_s: float = 0.0
    accept_s: float = 0.0

    def record_step(self, drafted: int, accepted: int) -> None:
        self.steps += 1
        self.drafted += drafted
        while len(self.accepted_hist) <= accepted:
            self.accepted_hist.append(0)
        self.accepted_hist[accepted] += 1

    @property
    def accepted(self) -> int:
        """Draft tokens accepted, summed over steps."""
        return sum(k * c for k, c in enumerate(self.accepted_hist))

    @property
    def accepted_drafts_per_step(self) -> float:
        """Mean draft tokens accepted (and emitted) per verify step (0 without steps)."""
        return self.accepted / self.steps if self.steps else 0.0

    @property
    def mean_accepted(self) -> float:
        """Deprecated: :attr:`accepted_drafts_per_step` (the old name read as either rate)."""
        warnings.warn("RequestMetrics.mean_accepted is accepted_drafts_per_step now (tokens_per_step counts the "
                      "bonus token too)", DeprecationWarning, stacklevel=2)
        return self.accepted_drafts_per_step

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens emitted per verify step (accepted drafts + the bonus/recovery token)."""
        return (self.tokens - 1) / self.steps if self.steps else 0.0

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.propose_s + self.verify_s + self.accept_s

    def depth_acceptance(self) -> list[float]:
        """``r[d-1]``: share of steps that accepted at least ``d`` draft tokens, d = 1, 2, ..."""
        if not self.steps:
            return []
        out, remaining = [], self.steps
        for count in self.accepted_hist[:-1]:
            remaining -= count
            out.append(remaining / self.steps)
        return out

    def summary(self) -> str:
        return (
            f"steps={self.steps} tokens={self.tokens} drafted={self.drafted} "
            f"accepted_drafts_per_step={self.accepted_drafts_per_step:.2f} tokens_per_step={self.tokens_per_step:.2f} "
            f"time: prefill={self.prefill_s:.3f}s propose={self.propose_s:.3f}s "
            f"verify={self.verify_s:.3f}s accept={self.accept_s:.3f}s hist={self.accepted_hist}"
        )

    def merge(self, other: "RequestMetrics") -> "RequestMetrics":
        """Sum of two requests' metrics (for per-category totals)."""
        hist = [0] * max(len(self.accepted_hist), len(other.accepted_hist))
        for h in (self.accepted_hist, other.accepted_hist):
            for k, c in enumerate(h):
                hist[k] += c
        return RequestMetrics(
            steps=self.steps + other.steps,
            tokens=self.tokens + other.tokens,
            drafted=self.drafted + other.drafted,
            accepted_hist=hist,
            prefill_s=self.prefill_s + other.prefill_s,
            propose_s=self.propose_s + other.propose_s,
            verify_s=self.verify_s + other.verify_s,
            accept_s=self.accept_s + other.accept_s,
        )
