"""Per-request speculative-decoding metrics.

Two rates, by these names everywhere: ``tokens_per_step`` (emitted per verify step, bonus included;
Spec-Bench's tau) and ``accepted_drafts_per_step`` (``tokens_per_step - 1`` when no step was cut).
Only emitted tokens count (drafts past ``max_new_tokens`` or a stop token do not). Times are the
wall-clock seconds of each batch step the request took part in (what its latency saw).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestMetrics:
    """One request's ``steps`` (verify forwards, not the prefill), ``tokens`` (emitted, the prefill's
    included), ``drafted`` (nodes verified), ``accepted_hist[k]`` (steps emitting exactly ``k``
    accepted drafts) and seconds per phase (``prefill_s``, ``propose_s``, ``verify_s``, ``accept_s``)."""

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
