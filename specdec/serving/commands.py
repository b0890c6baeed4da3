"""``specdec plan`` and ``specdec review`` subcommands; :func:`register` adds them to a CLI.

    specdec plan --proposer suffix --memory-gb 2 --ttft 2 --tpot 0.15 --out plan_report
    specdec plan --pools pools.toml --proposer suffix --proposer draft:/models/small --out plan_report
    specdec review plan_report          # exit status 1 when the setting is stale
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .cost import DEFAULT_GRID, StepCostModel, calibrate_engine
from .measure import (build_workload, default_workload_path, fingerprints, load_target, measure_proposer,
                      target_memory)
from .metrics import SLO
from .plan import DEFAULT_FRACTIONS, PlanSettings, plan_pool
from .pools import Pool, load_pools
from .report import write_report
from .review import compare, load_trigger, make_trigger, review_markdown

QUICK_GRID = {"batch": (1, 2, 4, 8), "tokens": (1, 4, 8, 16), "context": (64, 320), "prefill": (64, 256)}


def _log(msg: str) -> None:
    print(f"[specdec {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _csv(text: str | None) -> list[str] | None:
    return None if not text else [t.strip() for t in text.split(",") if t.strip()]


def register(subparsers) -> None:
    """Add ``plan`` and ``review`` to an ``argparse`` subparsers object (``parser.add_subparsers()``)."""
    p = subparsers.add_parser("plan", help="measure, simulate load, and recommend a speculation setting per pool",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="default", help="'default' (embedded SmolLM2-135M) or a HF model directory")
    p.add_argument("--proposer", action="append", dest="proposers", metavar="SPEC",
                   help="candidate proposer: suffix | draft:<model dir> | medusa:<artifact dir> | eagle:<artifact dir> "
                        "(repeatable; default suffix)")
    p.add_argument("--workload", default=None, help="Spec-Bench style JSONL of prompts (default: the packaged dev sample)")
    p.add_argument("--categories", default=None, help="comma-separated subset of categories")
    p.add_argument("--per-category", type=int, default=2, help="prompts per category (default 2)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--pools", default=None, help="pool TOML (see specdec.serving.pools); default one pool from --ttft/--tpot")
    p.add_argument("--ttft", type=float, default=2.0, help="time-to-first-token SLO in seconds (single-pool mode)")
    p.add_argument("--tpot", type=float, default=0.15, help="time-per-output-token SLO in seconds (single-pool mode)")
    p.add_argument("--memory-gb", type=float, required=True, help="device memory budget for weights + KV cache (GiB)")
    p.add_argument("--kv-dtype", default=None, help="KV cache dtype (default: the model's)")
    p.add_argument("--max-budget", type=int, default=8, help="largest draft budget considered (tokens per request per step)")
    p.add_argument("--requests", type=int, default=200, help="simulated requests per load level")
    p.add_argument("--replications", type=int, default=2)
    p.add_argument("--loads", default=None, help="comma-separated load levels as fractions of saturation")
    p.add_argument("--cost", default=None, help="reuse a calibration JSON instead of measuring")
    p.add_argument("--quick", action="store_true", help="smaller calibration grid (about half the time)")
    p.add_argument("--tolerance", type=float, default=0.15, help="acceptance drift that review will flag (relative)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--out", default="plan_report", help="output directory")
    p.set_defaults(func=run_plan)

    r = subparsers.add_parser("review", help="re-measure a plan's basis; flag fingerprint changes and acceptance drift")
    r.add_argument("report", help="a plan's output directory (or its review.json)")
    r.add_argument("--target", default=None, help="target to review against (default: the plan's)")
    r.add_argument("--tolerance", type=float, default=None, help="override the plan's drift tolerance")
    r.add_argument("--out", default=None, help="where to write review.md (default: beside review.json)")
    r.set_defaults(func=run_review)


def run_plan(args) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    proposers = args.proposers or ["suffix"]
    pools = load_pools(args.pools) if args.pools else {"default": Pool("default", SLO(args.ttft, args.tpot), "off")}
    fractions = tuple(float(x) for x in _csv(args.loads)) if args.loads else DEFAULT_FRACTIONS
    settings = PlanSettings(int(args.memory_gb * 2**30), args.max_budget, args.requests, fractions, args.replications, args.seed)
    _log(f"loading target {args.target}")
    model, tok, name = load_target(args.target)
    fps = fingerprints(model, tok)
    workload_path = args.workload or str(default_workload_path())
    _log(f"workload {workload_path}: greedy outputs ({args.per_category}/category, {args.max_new_tokens} tokens)")
    wl = build_workload(model, tok, workload_path, categories=_csv(args.categories), per_category=args.per_category,
                        max_new_tokens=args.max_new_tokens, target_fp=fps["target"], cache_dir=out / ".cache")
    if args.cost:
        cost = StepCostModel.load(args.cost)
        _log(f"cost model from {args.cost} (fit error {cost.mean_rel_error:.1%})")
    else:
        grid = QUICK_GRID if args.quick else DEFAULT_GRID
        _log("calibrating the step-time model on this machine (the engine's verify + compaction path)")
        cost = calibrate_engine(model, batches=grid["batch"], tokens=grid["tokens"], contexts=grid["context"],
                                prefills=grid["prefill"], repeats=2,
                                meta={"target": name, "target_fingerprint": fps["target"]})
        cost.save(out / "cost.json")
        _log(f"cost model: mean error {cost.mean_rel_error:.1%}, leave-one-out {cost.loo_rel_error:.1%}")
    mem = target_memory(model, args.kv_dtype)
    measured, described = {}, []
    for spec in proposers:
        _log(f"measuring acceptance of {spec}")
        m = measure_proposer(spec, model, tok, wl, args.max_budget)
        measured[spec] = (m.acceptance, m.memory)
        described.append({"spec": spec, "artifact": m.artifact, "acceptance": m.acceptance, "memory": m.memory})
    _log("simulating load sweeps")
    plans = [plan_pool(pool, measured, cost, wl.items(), settings, mem["weights_bytes"], mem["kv_bytes_per_token"])
             for pool in pools.values()]
    workload_desc = {"path": workload_path, "categories": _csv(args.categories), "per_category": args.per_category,
                     "max_new_tokens": args.max_new_tokens}
    trigger = make_trigger(target_spec=args.target, fingerprints=fps, workload=workload_desc, budget=args.max_budget,
                           proposers={d["spec"]: d for d in described}, tolerance=args.tolerance)
    context = {"target": f"{name} ({fps['target']})", "workload": f"{workload_path}, {len(wl.prompts)} prompts",
               "memory budget": f"{args.memory_gb:g} GiB", "KV bytes/token": f"{mem['kv_bytes_per_token']} ({mem['kv_dtype']})",
               "weights": f"{mem['weights_bytes'] / 2**20:.1f} MiB", "max draft budget": args.max_budget,
               "simulated": f"{args.requests} requests x {args.replications} replications per load level"}
    path = write_report(out, title=f"Speculation plan for {name}", context=context, cost=cost, proposers=described,
                        pool_plans=plans, trigger=trigger)
    for pp in plans:
        print(f"{pp.pool.name}: {pp.verdict}")
    print(f"report: {path}")
    return 0


def run_review(args) -> int:
    trigger = load_trigger(args.report)
    target = args.target or trigger["target"]
    _log(f"loading target {target}")
    model, tok, _ = load_target(target)
    fps = fingerprints(model, tok)
    wl_desc = trigger["workload"]
    base = Path(args.report) if Path(args.report).is_dir() else Path(args.report).parent
    wl = build_workload(model, tok, wl_desc["path"], categories=wl_desc["categories"], per_category=wl_desc["per_category"],
                        max_new_tokens=wl_desc["max_new_tokens"], target_fp=fps["target"], cache_dir=base / ".cache")
    artifacts, acceptance = {}, {}
    for spec in trigger["proposers"]:
        try:
            m = measure_proposer(spec, model, tok, wl, int(trigger["budget"]))
        except (ValueError, OSError) as e:  # e.g. heads refusing a new checkpoint: reported as a finding
            _log(f"{spec}: {e}")
            continue
        artifacts[spec], acceptance[spec] = m.artifact, m.acceptance
    flags = compare(trigger, fps, artifacts, acceptance, args.tolerance)
    text = review_markdown(trigger, flags, acceptance)
    out = Path(args.out) if args.out else base / "review.md"
    out.write_text(text)
    print(text)
    return 1 if flags else 0


def main(argv=None) -> int:
    """Stand-alone entry point (``python -m specdec.serving.commands plan ...``) until the main CLI wires :func:`register`."""
    parser = argparse.ArgumentParser(prog="specdec")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
