"""Synthetic cost models, acceptance distributions and workloads shared by the plan tests, and the pool
files and fake-server command of the vLLM plan's tests (tests/vllm imports these too: no test-only deps).

The synthetic cost model is GPU-shaped on purpose: a large fixed cost per step (weights are read
once whatever the batch) plus a per-token cost, so speculation pays at small batch and becomes a
tax at large batch -- the regime the gate exists for.
"""

import json
import sys
from pathlib import Path

import numpy as np

from specdec.estimate.acceptance import AcceptanceDist
from specdec.estimate.step_cost import StepCostModel
from specdec.plan.workload import WorkloadItem, make_requests, poisson_arrivals

PROMPTS = Path(__file__).resolve().parents[1] / "specdec" / "data" / "prompts_dev_sample.jsonl"
FAKE_SERVER = Path(__file__).resolve().parent / "plan" / "fake_vllm_server.py"


def gpu_like_cost() -> StepCostModel:
    # fixed 10 ms, 0.2 ms per sequence, 0.5 ms per token, tiny attention and KV-read terms
    return StepCostModel(np.array([0.010, 0.0002, 0.0005, 1e-8, 1e-7, 0.0]))


def good_acceptance(max_budget: int = 6) -> AcceptanceDist:
    # per-token acceptance ~0.7, truncated geometric: mean ~1.9 accepted at budget 6
    p = np.array([0.7 ** a * 0.3 for a in range(max_budget)] + [0.7 ** max_budget])
    return AcceptanceDist(p * 10_000, propose_s_per_req=0.0002, name="good")


def zero_acceptance(max_budget: int = 6) -> AcceptanceDist:
    counts = np.zeros(max_budget + 1)
    counts[0] = 1000
    return AcceptanceDist(counts, propose_s_per_req=0.0002, name="zero")


def items() -> list[WorkloadItem]:
    return [WorkloadItem(64, 48, "a"), WorkloadItem(128, 96, "b"), WorkloadItem(32, 64, "a")]


def poisson_requests(rate: float, n: int, seed: int = 0, opt_out_fraction: float = 0.0):
    rng = np.random.default_rng(seed)
    return make_requests(items(), poisson_arrivals(rate, n, rng), rng, opt_out_fraction)


def toml_table(header: str, **keys) -> str:
    """``[header]`` and one ``key = value`` line per key, in order (values written as JSON, which TOML reads
    for strings, numbers, booleans and lists; paths as strings)."""
    lines = [f"{k} = {json.dumps(str(v) if isinstance(v, Path) else v)}" for k, v in keys.items()]
    return "\n".join([f"[{header}]", *lines]) + "\n"


def pool_toml(name: str, *, sampling: dict | None = None, **keys) -> str:
    """A vLLM plan pool file's ``[pools.<name>]`` table with ``keys``, then its ``sampling`` sub-table if given."""
    text = toml_table(f"pools.{name}", **keys)
    return text if sampling is None else text + toml_table(f"pools.{name}.sampling", **sampling)


def fake_serve(*flags: str) -> str:
    """A ``--serve`` command starting tests/plan/fake_vllm_server.py with ``flags``."""
    return " ".join([sys.executable, str(FAKE_SERVER), "--port", "{port}", *flags, "{speculative_config}"])
