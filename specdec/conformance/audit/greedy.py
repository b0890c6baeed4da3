"""Greedy speculation: token-for-token equality with the same engine's greedy output without it.

Kernels whose numerics depend on how many tokens a step verifies can flip a near-tie argmax: a bias
differs early and often, a flip late and rarely, so :func:`check_greedy` reports where outputs differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .engine import Engine, EngineFailed, Job, Refused, Samples
from .settings import Sampling


@dataclass
class GreedyResult:
    """Greedy equality of ``prompts`` prompts x ``tokens``: ``verdict`` (``inconclusive``: equal, no draft
    accepted), per prompt the first differing ``positions`` (0-based, or None), a refusal's ``message``."""

    verdict: str
    prompts: int
    tokens: int
    positions: list = field(default_factory=list)
    drafted: int | None = None
    accepted: int | None = None
    requests: int | None = None
    message: str | None = None
    plain_outcome: object | None = None

    @property
    def mismatched(self) -> int:
        return sum(p is not None for p in self.positions)

    @property
    def mismatch_rate(self) -> float:
        return self.mismatched / max(self.prompts, 1)

    @property
    def first_mismatch(self) -> int | None:
        found = [p for p in self.positions if p is not None]
        return min(found) if found else None


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def check_greedy(engine: Engine, prompts: Sequence[Sequence[int]], tokens: int = 64, *, seed: int = 0,
                 stop_tokens: tuple[int, ...] = (), plain_outcome=None) -> GreedyResult:
    """Greedy outputs of ``prompts`` with speculation against without; ``plain_outcome``: reuse an earlier
    result's run without speculation (same engine and prompts)."""
    if not prompts:
        raise ValueError("check_greedy needs at least one prompt")
    s = Sampling(temperature=0.0, max_tokens=tokens, stop_tokens=tuple(stop_tokens))
    prompts = tuple(tuple(int(t) for t in p) for p in prompts)
    spec = engine.run([Job(prompts, (s,) * len(prompts), 1, seed)], True)[0]
    plain = plain_outcome if plain_outcome is not None else \
        engine.run([Job(prompts, (s,) * len(prompts), 1, seed + len(prompts))], False)[0]
    for arm, out in (("with", spec), ("without", plain)):
        if isinstance(out, (Refused, EngineFailed)):
            kind = "refused" if isinstance(out, Refused) else "error"
            return GreedyResult(kind, len(prompts), tokens, message=f"{kind} {arm} speculation: {out}",
                                plain_outcome=plain)
    assert isinstance(spec, Samples) and isinstance(plain, Samples)
    positions = [_first_difference(a[0], b[0]) for a, b in zip(spec.outputs, plain.outputs)]
    if any(p is not None for p in positions):
        verdict = "biased"
    elif not spec.accepted:
        verdict = "inconclusive"
    else:
        verdict = "exact"
    return GreedyResult(verdict, len(prompts), tokens, positions, spec.drafted, spec.accepted, spec.requests,
                        plain_outcome=plain)
