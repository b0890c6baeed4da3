"""The drafter's options: defaults, overridden by a subclass's ``OPTIONS`` and the ``SPECDEC_VLLM_OPTIONS`` JSON.

vLLM builds a ``custom_class`` drafter with the engine config only, so its settings travel in an
environment variable that vLLM's engine processes inherit, or in a subclass's ``OPTIONS`` dict.
Unknown keys and wrong types are refused with the key's name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Mapping

ENV = "SPECDEC_VLLM_OPTIONS"


@dataclasses.dataclass(frozen=True)
class DrafterOptions:
    """Settings of a specdec vLLM drafter (user guide: docs/vllm.md, "Enable it").

    Attributes:
        proposer: ``"suffix"`` (the batched C++ path), ``"suffix-python"`` (the same proposer one
            request at a time, for comparison), or ``"module:function"`` returning any deterministic
            specdec Proposer for a vocab size.
        tree_budget / max_depth: nodes of the tree the chain is chosen from, and its deepest node
            (default: num_speculative_tokens).
        min_match_len, min_prob: the suffix proposer's drafting floors.
        use_global / global_cache_bytes: draft from a global cache of finished responses under a byte
            cap. Off by default: the drafter sees no tenants, so acceptance would leak across users.
        gate_off_above / gate_on_below: the load gate (``inf``: never gate on load).
        min_accept_rate: stop drafting while recent acceptance is below this (probing).
        cost_gate: each step's budget from this engine's own step times
            (:class:`~specdec.control.cost_gate.CostGate`), below the load gate.
        park_steps / park_seconds / max_parked / max_parked_tokens: when a request out of the batch is
            ended (:class:`~specdec.proposers.suffix_rows.RowTracking`).
        log_every: steps between log lines (0: none).
        fix_cpu_expand: on vLLM CPU builds with vLLM issue 55005, register a correct expand kernel;
            False refuses to start there.
    """

    proposer: str = "suffix"
    tree_budget: int | None = None
    max_depth: int | None = None
    min_match_len: int = 1
    min_prob: float = 0.05
    use_global: bool = False
    global_cache_bytes: int = 256 << 20
    gate_off_above: float = math.inf
    gate_on_below: float | None = None
    min_accept_rate: float = 0.0
    cost_gate: bool = False
    park_steps: int = 64
    park_seconds: float = 600.0
    max_parked: int = 1024
    max_parked_tokens: int = 1 << 22
    log_every: int = 100
    fix_cpu_expand: bool = True

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            kind = {"int": int, "float": (int, float), "bool": bool, "str": str}.get(str(f.type).split(" ")[0])
            if f.name in ("tree_budget", "max_depth", "gate_on_below") and value is None:
                continue
            if kind is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
                raise TypeError(f"drafter option {f.name!r} must be {f.type}, got {value!r}")
        if self.tree_budget is not None and self.tree_budget < 1:
            raise ValueError(f"drafter option 'tree_budget' must be >= 1, got {self.tree_budget}")
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"drafter option 'max_depth' must be >= 1, got {self.max_depth}")
        if self.log_every < 0:
            raise ValueError(f"drafter option 'log_every' must be >= 0, got {self.log_every}")
        if self.proposer not in ("suffix", "suffix-python") and ":" not in self.proposer:
            raise ValueError(f"drafter option 'proposer' must be 'suffix', 'suffix-python' or 'module:function', "
                             f"got {self.proposer!r}")

    @classmethod
    def resolve(cls, overrides: Mapping | None = None, environ: Mapping[str, str] | None = None) -> "DrafterOptions":
        """Defaults, then ``overrides`` (a subclass's OPTIONS), then the JSON in ``SPECDEC_VLLM_OPTIONS``.
        ValueError when the variable is not a JSON object or names an unknown option; TypeError for a
        wrong type."""
        merged = dict(overrides or {})
        raw = (os.environ if environ is None else environ).get(ENV, "").strip()
        if raw:
            try:
                extra = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{ENV} must be a JSON object, got {raw!r}: {exc}") from None
            if not isinstance(extra, dict):
                raise ValueError(f"{ENV} must be a JSON object, got {type(extra).__name__}")
            merged.update(extra)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ValueError(f"unknown drafter option(s) {unknown}; known: {sorted(known)}")
        for key in ("gate_off_above", "gate_on_below"):
            if merged.get(key) in ("inf", "Infinity"):
                merged[key] = math.inf
        return cls(**merged)
