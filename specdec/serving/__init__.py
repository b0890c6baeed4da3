"""Deciding whether speculation pays for a fleet: cost model, memory accounting, acceptance,
a continuous-batching simulator, speculation policies, the runtime LoadGate and CostGate, pool configs, and
the ``plan`` / ``review`` commands built on them (see docs/deciding.md).
"""

from .acceptance import AcceptanceDist, from_histogram, measure_by_replay
from .cost import Sample, StepCostModel, calibrate
from .cost_gate import CostGate
from .gate import BudgetOptimizer, GateDecision, LoadGate
from .memory import ProposerMemory, admitted_concurrency, kv_bytes_per_token, measure_proposer_memory
from .metrics import SLO, RequestRecord, summarize
from .policies import AlwaysOn, Gated, Off, Policy, adaptive, gated
from .pools import Pool, load_pools, parse_pools
from .simulator import ServerConfig, SimResult, simulate
from .sweep import capacity_rps, sweep
from .workload import SimRequest, WorkloadItem, make_requests, poisson_arrivals

__all__ = [
    "AcceptanceDist", "AlwaysOn", "BudgetOptimizer", "CostGate", "GateDecision", "Gated", "LoadGate", "Off", "Policy",
    "Pool",
    "ProposerMemory", "RequestRecord", "SLO", "Sample", "ServerConfig", "SimRequest", "SimResult", "StepCostModel",
    "WorkloadItem", "adaptive", "admitted_concurrency", "calibrate", "capacity_rps", "from_histogram", "gated",
    "kv_bytes_per_token", "load_pools", "make_requests", "measure_by_replay", "measure_proposer_memory", "parse_pools",
    "poisson_arrivals", "simulate", "summarize", "sweep",
]
