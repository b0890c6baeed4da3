"""Per-pool speculation policy from a TOML file (pools differ in objectives, so speculation is set per
pool), validated with errors that say what to fix. Format::

    [pools.interactive]
    ttft_s = 1.0            # time-to-first-token objective (seconds)
    tpot_s = 0.08           # time-per-output-token objective (seconds)
    proposer = "suffix"     # a proposer name, or "none"
    policy = "gated"        # off | always | gated | adaptive
    budget = 4              # draft tokens per request per step (always, gated; max for adaptive)

    [pools.interactive.gate]  # required for "gated", optional for "adaptive"
    off_above = 8           # stop speculating when more than this many requests run
    on_below = 6            # resume at or below this (hysteresis); default = off_above
    min_accept_rate = 0.1   # stop drafting when recent acceptance falls below this

    [pools.batch]
    ttft_s = 30.0
    tpot_s = 1.0
    policy = "off"
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path

from ..control.load_gate import BudgetOptimizer
from .goodput import SLO
from .policies import AlwaysOn, Off, Policy, adaptive, gated
from .toml_checks import check_number, read_tables

POLICIES = ("off", "always", "gated", "adaptive")
_POOL_KEYS = {"ttft_s", "tpot_s", "proposer", "policy", "budget", "gate"}
_GATE_KEYS = {"off_above", "on_below", "min_accept_rate"}


@dataclasses.dataclass(frozen=True)
class GateSpec:
    off_above: float = math.inf
    on_below: float | None = None
    min_accept_rate: float = 0.0


@dataclasses.dataclass(frozen=True)
class Pool:
    """One pool's objectives and speculation setting."""

    name: str
    slo: SLO
    policy: str = "off"
    proposer: str | None = None
    budget: int = 4
    gate: GateSpec | None = None

    def make_policy(self, optimizer: BudgetOptimizer | None = None) -> Policy:
        """The runtime :class:`Policy` for this pool (``adaptive`` needs the ``optimizer``)."""
        if self.policy == "off":
            return Off()
        if self.policy == "always":
            return AlwaysOn(self.budget)
        g = self.gate or GateSpec()
        if self.policy == "gated":
            return gated(g.off_above, self.budget, g.on_below, g.min_accept_rate)
        if optimizer is None:
            raise ValueError(f"pool {self.name!r}: policy 'adaptive' needs a BudgetOptimizer (cost model + acceptance)")
        return adaptive(optimizer, g.off_above, g.on_below)


# no finiteness check: ``ttft_s = inf`` states no objective
_num = functools.partial(check_number, lo=0.0, finite=False)


def _parse_pool(name: str, d) -> Pool:
    where = f"pools.{name}"
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a table, got {type(d).__name__}")
    unknown = set(d) - _POOL_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(_POOL_KEYS)}")
    for key in ("ttft_s", "tpot_s"):
        if key not in d:
            raise ValueError(f"{where}: missing required key {key!r} (seconds)")
    slo = SLO(
        float(_num(where, "ttft_s", d["ttft_s"], strict=True)), float(_num(where, "tpot_s", d["tpot_s"], strict=True))
    )
    policy = d.get("policy", "off")
    if policy not in POLICIES:
        raise ValueError(f"{where}.policy must be one of {list(POLICIES)}, got {policy!r}")
    proposer = d.get("proposer", "none")
    if not isinstance(proposer, str) or not proposer:
        raise ValueError(f'{where}.proposer must be a proposer name or "none", got {proposer!r}')
    proposer = None if proposer == "none" else proposer
    if policy != "off" and proposer is None:
        raise ValueError(f'{where}: policy {policy!r} speculates, so it needs a proposer (or set policy = "off")')
    budget = int(_num(where, "budget", d.get("budget", 4), integer=True, lo=1))
    gate = None
    if "gate" in d:
        g = d["gate"]
        if not isinstance(g, dict):
            raise ValueError(f"{where}.gate must be a table, got {type(g).__name__}")
        unknown = set(g) - _GATE_KEYS
        if unknown:
            raise ValueError(f"{where}.gate: unknown keys {sorted(unknown)}; allowed: {sorted(_GATE_KEYS)}")
        if "off_above" not in g:
            raise ValueError(
                f"{where}.gate: missing required key 'off_above' (batch size above which speculation stops)"
            )
        off_above = _num(f"{where}.gate", "off_above", g["off_above"], integer=True)
        on_below = _num(f"{where}.gate", "on_below", g.get("on_below", off_above), integer=True)
        if on_below > off_above:
            raise ValueError(
                f"{where}.gate: on_below ({on_below}) must be <= off_above ({off_above}); otherwise the gate would flap"
            )
        rate = _num(f"{where}.gate", "min_accept_rate", g.get("min_accept_rate", 0.0))
        if rate > 1:
            raise ValueError(f"{where}.gate.min_accept_rate must be in [0, 1], got {rate}")
        gate = GateSpec(off_above, on_below, float(rate))
    if policy == "gated" and gate is None:
        raise ValueError(
            f"{where}: policy 'gated' needs a [{where}.gate] table with off_above (and optionally on_below)"
        )
    if policy in ("off", "always") and gate is not None:
        raise ValueError(
            f"{where}: a gate table has no effect with policy {policy!r}; remove it or use 'gated'/'adaptive'"
        )
    return Pool(name, slo, policy, proposer, budget, gate)


def parse_pools(text: str, source: str = "<string>") -> dict[str, Pool]:
    """Parse and validate pool TOML text; returns pools by name, in file order."""
    pools = read_tables(text, source, {"pools"}, "only [pools.<name>] tables").get("pools")
    if not isinstance(pools, dict) or not pools:
        raise ValueError(f"{source}: no pools defined; add at least one [pools.<name>] table")
    try:
        return {name: _parse_pool(name, d) for name, d in pools.items()}
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def load_pools(path: str | Path) -> dict[str, Pool]:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"pool config {path} does not exist")
    return parse_pools(path.read_text(), str(path))


def dump_pools(pools: dict[str, Pool]) -> str:
    """TOML text for ``pools`` (what ``plan`` writes as its recommendation); round-trips through parse_pools."""
    lines = []
    for p in pools.values():
        lines += [
            f"[pools.{p.name}]",
            f"ttft_s = {p.slo.ttft_s!r}",
            f"tpot_s = {p.slo.tpot_s!r}",
            f'proposer = "{p.proposer or "none"}"',
            f'policy = "{p.policy}"',
            f"budget = {p.budget}",
        ]
        if p.gate is not None and p.policy in ("gated", "adaptive") and math.isfinite(p.gate.off_above):
            lines += [
                "",
                f"[pools.{p.name}.gate]",
                f"off_above = {int(p.gate.off_above)}",
                f"on_below = {int(p.gate.on_below if p.gate.on_below is not None else p.gate.off_above)}",
                f"min_accept_rate = {p.gate.min_accept_rate!r}",
            ]
        lines.append("")
    return "\n".join(lines)
