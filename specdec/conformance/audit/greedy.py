"""Greedy speculation: token-for-token equality with the same engine's greedy output without it.

Greedy speculation promises identical tokens. An engine can still break that without any sampling
bug: kernels whose numerics depend on how many tokens a step verifies (batch shapes, split-K,
attention over a verify block) can flip an argmax where two logits nearly tie. :func:`check_greedy`
runs the same prompts through the engine with and without speculation at temperature 0 and reports
how many outputs differ and where the first difference falls, so a flip is told from a bias (a
bias differs early and often; a near-tie flip late and rarely).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .engine import Engine, EngineFailed, Job, Refused, Samples
from .settings import Sampling


@dataclass
class GreedyResult:
    """Greedy equality over ``prompts`` prompts of ``tokens`` tokens.

    Attributes:
        verdict: ``exact`` (all equal, drafts accepted), ``biased`` (some output differs),
            ``inconclusive`` (all equal but no accepted draft reported), ``refused`` / ``error``.
        positions: per prompt, the first position (0-based) where the outputs differ, or None.
        message: the refusal or error, if any.
    """

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
    """Greedy outputs of ``prompts`` with speculation against without (``tokens`` each).

    ``plain_outcome``: the run without speculation of an earlier check on the same engine and
    prompts (``result.plain_outcome``), so that checking several methods runs it once.
    """
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
