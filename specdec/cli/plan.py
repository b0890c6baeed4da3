"""``specdec plan``: measure the target and proposers, simulate load, recommend a setting per pool.

    specdec plan --proposer suffix --memory-gb 2 --ttft 2 --tpot 0.15 --out plan_report
    specdec plan --pools pools.toml --proposer suffix --proposer draft:/models/small --out plan_report

``specdec review plan_report`` (:mod:`specdec.cli.review`) re-measures a plan's basis later.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..models import load_target
from ..estimate.acceptance import AcceptanceDist
from ..measure.step_timing import DEFAULT_GRID, calibrate_engine
from ..estimate.step_cost import StepCostModel
from ..measure.proposer_stats import (build_workload, default_workload_path, fingerprints, measure_proposer,
                               target_memory)
from ..plan.goodput import SLO
from ..plan.planner import DEFAULT_FRACTIONS, PlanSettings, plan_pool
from ..plan.pools import Pool, load_pools
from ..plan.report import write_report
from ..plan.review import make_trigger
from ..prompts import read_prompt_records
from . import plan_vllm
from .args import (UsageError, add_model_args, add_proposer_args, bounded, csv, positive, positive_int, probability,
                   proposers)
from .common import log

QUICK_GRID = {"batch": (1, 2, 4, 8), "tokens": (1, 4, 8, 16), "context": (64, 320), "prefill": (64, 256)}


def register(subparsers) -> None:
    """Add ``plan`` to an ``argparse`` subparsers object (``parser.add_subparsers()``)."""
    p = subparsers.add_parser("plan", help="measure, simulate load, and recommend a speculation setting per pool",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=("specdec", "vllm"), default="specdec",
                   help="specdec: plan specdec's own decoding loop (default); vllm: measure vLLM servers and write "
                        "each pool's speculative_config (specdec.cli.plan_vllm)")
    add_model_args(p)
    add_proposer_args(p, default=["suffix"])
    p.add_argument(
        "--workload", default=None, help="Spec-Bench style JSONL of prompts (default: the packaged dev sample)"
    )
    p.add_argument("--categories", type=csv, default=None, help="comma-separated subset of categories")
    p.add_argument("--per-category", type=positive_int, default=2, help="prompts per category (default 2)")
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    p.add_argument(
        "--pools", default=None, help="pool TOML (engine specdec: specdec.plan.pools, default one pool from "
        "--ttft/--tpot; engine vllm: specdec.plan.vllm.pool_spec, required)"
    )
    p.add_argument("--ttft", type=positive, default=2.0, help="time-to-first-token SLO in seconds (single-pool mode)")
    p.add_argument(
        "--tpot", type=positive, default=0.15, help="time-per-output-token SLO in seconds (single-pool mode)"
    )
    p.add_argument(
        "--memory-gb", type=positive, default=None,
        help="engine specdec (required there): device memory budget for weights + KV cache (GiB)"
    )
    p.add_argument("--kv-dtype", default=None, help="KV cache dtype (default: the model's)")
    p.add_argument(
        "--max-budget",
        type=positive_int,
        default=8,
        help="largest draft budget considered (tokens per request per step)",
    )
    p.add_argument("--max-batch", type=positive_int, default=None,
                   help="running requests the server admits at most (vLLM's max_num_seqs; default: memory decides)")
    p.add_argument("--scheduler", choices=("phased", "packed"), default="phased",
                   help="phased: prefill iterations apart from decode steps (specdec's own loop); packed: prefill "
                        "chunks ride in decode steps, nothing padded (vLLM V1; use with --cost from the engine, "
                        "benchmarks/vllm/plan_vs_measured.py)")
    p.add_argument("--max-batched-tokens", type=positive_int, default=None,
                   help="packed scheduler: tokens per step (vLLM's max_num_batched_tokens; default unlimited)")
    p.add_argument("--requests", type=positive_int, default=None, help="simulated requests per load level "
                   "(default 200; with --replay: the record's)")
    p.add_argument("--replications", type=positive_int, default=None,
                   help="arrival sequences simulated per load level (default 2; with --replay: the record's)")
    p.add_argument(
        "--loads",
        type=lambda t: [probability(x) for x in csv(t)],
        default=None,
        help="comma-separated load levels as fractions of saturation, in (0, 1]",
    )
    p.add_argument("--cost", default=None, help="reuse a calibration JSON instead of measuring")
    p.add_argument("--cost-off", default=None,
                   help="the step-time model of the engine without a drafter, for policies that never draft, when "
                        "it runs differently (vLLM: async scheduling is off with custom_class; default: --cost)")
    p.add_argument("--acceptance", action="append", default=[], metavar="SPEC=FILE",
                   help="use this acceptance histogram for proposer SPEC instead of replaying it here, e.g. one "
                        "from an engine's own counters (benchmarks/vllm/plan_vs_measured.py writes "
                        "acceptance-<policy>.json); repeatable")
    p.add_argument("--cost-band", type=cost_band, default="fit",
                   help="also simulate with target steps this fraction slower and faster, in [0, 1), and flag "
                        "the loads where that goodput range spans more than 20%% of the goodput; 'fit' (default) "
                        "uses the cost model's leave-one-out error, capped at 0.5 (0 when it has none); 0 turns it "
                        "off; a band triples the simulation time")
    p.add_argument("--quick", action="store_true", help="smaller calibration grid (about half the time)")
    p.add_argument("--tolerance", type=probability, default=None,
                   help="acceptance drift that review will flag (relative; default 0.15)")
    p.add_argument("--seed", type=bounded(int), default=None, help="simulation seed (default 0; with --replay: the "
                   "record's)")
    p.add_argument("--out", default="plan_report", help="output directory")
    plan_vllm.add_plan_args(p)
    p.set_defaults(func=run_plan)


def cost_band(text: str):
    """``--cost-band``: 'fit' or a fraction in [0, 1)."""
    if text == "fit":
        return text
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cost-band takes 'fit' or a fraction in [0, 1), got {text!r}") from None
    if not 0 <= x < 1:
        raise argparse.ArgumentTypeError(f"--cost-band must be in [0, 1), got {text!r}")
    return x


def resolve_cost_band(arg, cost) -> tuple[float, str]:
    """``(band, where it came from)`` for ``--cost-band`` (a fraction, or 'fit': the cost model's
    :meth:`~specdec.estimate.step_cost.StepCostModel.error_band`)."""
    if arg != "fit":
        return arg, "--cost-band"
    band, loo = cost.error_band(), cost.loo_rel_error
    if not (math.isfinite(loo) and loo >= 0):
        return band, "none: the cost model has no leave-one-out error"
    return band, "the cost model's leave-one-out error" + (f" {loo:.0%}, capped at 50%" if loo > band else "")


def imported_acceptance(items: list[str], specs: list[str], max_budget: int) -> dict:
    """``{spec: (file, AcceptanceDist)}`` from ``--acceptance SPEC=FILE`` items, each checked."""
    out = {}
    for item in items:
        spec, sep, path = item.partition("=")
        if not sep or not spec or not path:
            raise UsageError(f"--acceptance takes SPEC=FILE, got {item!r}")
        if spec not in specs or spec == "none":
            raise UsageError(f"--acceptance names {spec!r}, which is not a drafting proposer of this plan "
                             f"(--proposer: {', '.join(specs)})")
        if spec in out:
            raise UsageError(f"--acceptance names {spec!r} twice")
        try:
            dist = AcceptanceDist.load(path)
        except ValueError as exc:
            raise UsageError(f"--acceptance {spec}: {exc}") from None
        if dist.max_budget < max_budget:
            raise UsageError(f"--acceptance {spec}: {path} was measured with {dist.max_budget} draft tokens per step; "
                             f"plan with --max-budget {dist.max_budget} or less (got {max_budget})")
        out[spec] = (path, dist)
    return out


# The parser leaves these None so that --replay tells a flag given from one left out.
DEFAULTS = {"requests": 200, "replications": 2, "seed": 0, "tolerance": 0.15}


def run_plan(args) -> int:
    if getattr(args, "engine", "specdec") == "vllm" and getattr(args, "replay", None):
        return plan_vllm.run_replay(args)
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if getattr(args, "engine", "specdec") == "vllm":
        return plan_vllm.run_plan(args)
    plan_vllm.check_flags(args, "specdec")
    if args.memory_gb is None:
        raise UsageError("the following arguments are required: --memory-gb (the device memory budget for weights + "
                         "KV cache, GiB)")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    specs = proposers(args)
    # Everything that can be wrong with the inputs is found before the target loads.
    pools = load_pools(args.pools) if args.pools else {"default": Pool("default", SLO(args.ttft, args.tpot), "off")}
    fractions = tuple(args.loads) if args.loads else DEFAULT_FRACTIONS
    if args.max_batched_tokens is not None and args.scheduler != "packed":
        raise UsageError("--max-batched-tokens is the packed scheduler's token budget; add --scheduler packed")
    settings = PlanSettings(
        int(args.memory_gb * 2**30), args.max_budget, args.requests, fractions, args.replications, args.seed,
        max_batch=args.max_batch, scheduler=args.scheduler, max_batched_tokens=args.max_batched_tokens,
    )
    workload_path = args.workload or str(default_workload_path())
    read_prompt_records(workload_path, categories=args.categories, per_category=args.per_category)
    cost = StepCostModel.load(args.cost) if args.cost else None
    if args.cost_off and not args.cost:
        raise UsageError("--cost-off pairs with --cost (both models from the same engine)")
    settings.cost_off = StepCostModel.load(args.cost_off) if args.cost_off else None
    imported = imported_acceptance(args.acceptance, specs, args.max_budget)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log(f"loading target {args.model}")
    model, tok, name = load_target(args.model)
    fps = fingerprints(model, tok)
    log(f"workload {workload_path}: greedy outputs ({args.per_category}/category, {args.max_new_tokens} tokens)")
    wl = build_workload(
        model,
        tok,
        workload_path,
        categories=args.categories,
        per_category=args.per_category,
        max_new_tokens=args.max_new_tokens,
        target_fp=fps["target"],
        cache_dir=out / ".cache",
    )
    if cost is not None:
        log(f"cost model from {args.cost} (fit error {cost.mean_rel_error:.1%})")
    else:
        grid = QUICK_GRID if args.quick else DEFAULT_GRID
        log("calibrating the step-time model on this machine (the engine's verify + compaction path)")
        cost = calibrate_engine(
            model,
            batches=grid["batch"],
            tokens=grid["tokens"],
            contexts=grid["context"],
            prefills=grid["prefill"],
            repeats=2,
            meta={"target": name, "target_fingerprint": fps["target"]},
        )
        cost.save(out / "cost.json")
        log(f"cost model: mean error {cost.mean_rel_error:.1%}, leave-one-out {cost.loo_rel_error:.1%}")
    settings.cost_band, band_source = resolve_cost_band(args.cost_band, cost)
    mem = target_memory(model, args.kv_dtype)
    measured, described = {}, []
    for spec in specs:
        source, dist = imported.get(spec, (None, None))
        log(f"measuring acceptance of {spec}" if source is None else f"acceptance of {spec} from {source}")
        m = measure_proposer(spec, model, tok, wl, args.max_budget, allow_mismatch=args.allow_mismatch,
                             acceptance=dist)
        measured[spec] = (m.acceptance, m.memory)
        described.append({"spec": spec, "artifact": m.artifact, "acceptance": m.acceptance, "memory": m.memory,
                          "acceptance_from": source})
    log("simulating load sweeps")
    plans = [
        plan_pool(pool, measured, cost, wl.items(), settings, mem["weights_bytes"], mem["kv_bytes_per_token"])
        for pool in pools.values()
    ]
    workload_desc = {
        "path": workload_path,
        "categories": args.categories,
        "per_category": args.per_category,
        "max_new_tokens": args.max_new_tokens,
    }
    trigger = make_trigger(
        target_spec=args.model,
        fingerprints=fps,
        workload=workload_desc,
        budget=args.max_budget,
        proposers={d["spec"]: d for d in described},
        tolerance=args.tolerance,
    )
    context = {
        "target": f"{name} ({fps['target']})",
        "workload": f"{workload_path}, {len(wl.prompts)} prompts",
        "memory budget": f"{args.memory_gb:g} GiB",
        "KV bytes/token": f"{mem['kv_bytes_per_token']} ({mem['kv_dtype']})",
        "weights": f"{mem['weights_bytes'] / 2**20:.1f} MiB",
        "max draft budget": args.max_budget,
        "simulated": f"{args.requests} requests x {args.replications} replications per load level",
        "cost band": f"+-{settings.cost_band:.0%} target step time ({band_source})",
    }
    path = write_report(
        out,
        title=f"Speculation plan for {name}",
        context=context,
        cost=cost,
        proposers=described,
        pool_plans=plans,
        trigger=trigger,
    )
    for pp in plans:
        print(f"{pp.pool.name}: {pp.verdict}")
    print(f"report: {path}")
    return 0
