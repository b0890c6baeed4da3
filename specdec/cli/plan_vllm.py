"""``specdec plan --engine vllm`` and ``specdec review --engine vllm``: the flags and the two runs.

    specdec plan --engine vllm --pools pools.toml --out plan_vllm \\
        --serve "python -m vllm.entrypoints.openai.api_server --model /models/m --port {port} \\
                 --max-num-seqs 16 --max-num-batched-tokens 2048 {speculative_config}"
    specdec review --engine vllm plan_vllm        # the same --serve as the plan, from its record
    specdec plan --engine vllm --replay plan_vllm --out plan_again   # today's code on the recorded runs

Every flag, the pool file (and the prompts it names), the candidates and their artifacts are
checked before the first server starts (:mod:`specdec.plan.vllm`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import UsageError, non_negative_int, positive, positive_int
from .common import log

# specdec-engine flags that mean nothing to a vLLM plan: given with --engine vllm, they are refused
SPECDEC_ONLY = {"proposer_list": "--proposer", "proposer_csv": "--proposers", "memory_gb": "--memory-gb",
                "kv_dtype": "--kv-dtype", "cost": "--cost", "cost_off": "--cost-off", "acceptance": "--acceptance",
                "workload": "--workload", "categories": "--categories", "loads": "--loads", "quick": "--quick",
                "allow_mismatch": "--allow-mismatch"}
VLLM_ONLY = {"serve": "--serve", "server": "--server", "server_env": "--server-env", "candidates": "--candidates",
             "draft_model": "--draft-model", "eagle_head": "--eagle-head", "eagle3_head": "--eagle3-head",
             "mtp": "--mtp", "levels": "--levels", "no_schedules": "--no-schedules", "gap": "--gap",
             "start_timeout": "--start-timeout", "request_timeout": "--request-timeout", "replay": "--replay",
             "bursts": "--bursts", "no_drift_check": "--no-drift-check"}
# what a replayed plan takes from its record: given with --replay, refused
RECORDED = {"pools": "--pools", "serve": "--serve", "server": "--server", "server_env": "--server-env",
            "candidates": "--candidates", "draft_model": "--draft-model", "eagle_head": "--eagle-head",
            "eagle3_head": "--eagle3-head", "mtp": "--mtp", "no_schedules": "--no-schedules",
            "gap": "--gap", "start_timeout": "--start-timeout", "request_timeout": "--request-timeout",
            "max_batch": "--max-batch", "max_batched_tokens": "--max-batched-tokens", "tolerance": "--tolerance",
            "bursts": "--bursts", "no_drift_check": "--no-drift-check"}


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return key, value


def add_server_args(p: argparse.ArgumentParser) -> None:
    """Where the servers come from (plan and review)."""
    p.add_argument("--serve", default=None, metavar="CMD",
                   help="engine vllm: the command that starts your server, with {port} and {speculative_config} "
                        "(an argument of its own: it becomes --speculative-config JSON, or nothing for off)")
    p.add_argument("--server", action="append", type=_pair, default=None, metavar="NAME=URL",
                   help="engine vllm: a running server for candidate NAME (e.g. off=http://host:8000); repeatable")
    p.add_argument("--server-env", action="append", type=_pair, default=None, metavar="KEY=VALUE",
                   help="engine vllm: environment for the servers --serve starts (e.g. PYTHONPATH with "
                        "arctic_inference for method suffix); repeatable")
    p.add_argument("--start-timeout", type=positive, default=None, help="engine vllm: seconds a server may take to "
                   "start (default 900)")
    p.add_argument("--request-timeout", type=positive, default=None, help="engine vllm: seconds per request "
                   "(default 300)")
    p.add_argument("--gap", type=positive, default=None, help="engine vllm: widest spread (s) of one engine step's "
                   "chunks at the client (default 0.012)")


def add_plan_args(p: argparse.ArgumentParser) -> None:
    """The flags only ``--engine vllm`` takes (``--pools``, ``--max-batch``, ``--max-batched-tokens``,
    ``--requests``, ``--replications``, ``--seed``, ``--tolerance``, ``--out`` are shared)."""
    add_server_args(p)
    p.add_argument("--candidates", default=None, metavar="LIST",
                   help="engine vllm: METHOD[:K] list (off, ngram, suffix, draft_model, eagle, eagle3, mtp, "
                        "custom_class); default: off, ngram and suffix at K = 2 and 4, each artifact given at 2 and "
                        "4, custom_class:4")
    p.add_argument("--draft-model", default=None, help="engine vllm: a draft model folder (method draft_model)")
    p.add_argument("--eagle-head", default=None, help="engine vllm: an EAGLE head folder (method eagle)")
    p.add_argument("--eagle3-head", default=None, help="engine vllm: an EAGLE-3 head folder (method eagle3)")
    p.add_argument("--mtp", action="store_true", default=None,
                   help="engine vllm: also try the target's own MTP layers (mtp:1, mtp:2)")
    p.add_argument("--levels", type=positive_int, default=None, help="engine vllm: load levels per pool (default 6)")
    p.add_argument("--bursts", type=positive_int, default=None,
                   help="engine vllm: full batches sent after each candidate's measurement (default 2; two or more "
                        "measure how far one burst's steps vary, which a loss at an overload must exceed to count)")
    p.add_argument("--no-drift-check", action="store_true", default=None,
                   help="engine vllm: do not start off's server again after the last candidate to see whether the "
                        "machine kept its speed (by default its drift widens every band; specdec.plan.vllm.drift)")
    p.add_argument("--no-schedules", action="store_true", default=None,
                   help="engine vllm: do not derive and measure num_speculative_tokens_per_batch_size schedules")
    p.add_argument("--replay", default=None, metavar="PLAN_DIR",
                   help="engine vllm: make a recorded plan again from the runs it measured, with no server "
                        "(specdec.plan.vllm.recorded): pools, candidates, engine and thresholds come from the "
                        "record; --levels, --requests, --replications and --seed may differ from it")


def check_flags(args, engine: str) -> None:
    """Refuse the other engine's flags by name (nothing given is silently ignored)."""
    foreign = SPECDEC_ONLY if engine == "vllm" else VLLM_ONLY
    given = [flag for dest, flag in foreign.items() if getattr(args, dest, None) not in (None, False, [])]
    if engine == "vllm" and getattr(args, "scheduler", "phased") != "phased":
        given.append("--scheduler")  # the vLLM plan always simulates vLLM's packed scheduler
    if given:
        raise UsageError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --engine {engine}")


def _source(args, log_dir: Path, recorded_serve: str | None = None):
    from ..plan.vllm.launcher import ServeCommand
    from ..plan.vllm.run_plan import ServerSource

    serve = args.serve or (None if args.server else recorded_serve)
    if (serve is None) == (args.server is None):
        raise UsageError("give either --serve CMD (specdec starts one server per candidate) or --server NAME=URL for "
                         "each candidate (servers already running), not both")
    if args.server_env and serve is None:
        raise UsageError("--server-env applies to servers --serve starts, not to running ones")
    urls = None if args.server is None else dict(args.server)
    if urls is not None and len(urls) != len(args.server):
        raise UsageError("--server names a candidate twice")
    command = None if serve is None else ServeCommand(serve)
    return ServerSource(log_dir, command=command, urls=urls, env=dict(args.server_env or []),
                        start_timeout=args.start_timeout or 900.0), command


def _engine_facts(args, command):
    from ..plan.vllm.engine_trace import Engine

    seqs = args.max_batch or (command and command.option("--max-num-seqs", "--max_num_seqs"))
    tokens = args.max_batched_tokens or (command and command.option("--max-num-batched-tokens",
                                                                    "--max_num_batched_tokens"))
    if not seqs or not tokens:
        raise UsageError("the servers' max_num_seqs and max_num_batched_tokens are needed to simulate them: put "
                         "--max-num-seqs and --max-num-batched-tokens in --serve, or give --max-batch and "
                         "--max-batched-tokens")
    try:
        return Engine(int(seqs), int(tokens))
    except ValueError as exc:
        raise UsageError(f"max_num_seqs / max_num_batched_tokens: {exc}") from None


def _target(args, command) -> str | None:
    target = args.model if args.model not in (None, "default") else (command.model() if command else None)
    return target


def run_plan(args) -> int:
    from ..plan.vllm.candidates import default_candidates, parse_candidates
    from ..plan.vllm.decide import Thresholds
    from ..plan.vllm.run_plan import PlanSettings, plan_vllm
    from ..plan.vllm.pool_spec import load_pool_file
    from ..plan.vllm.summary import write

    check_flags(args, "vllm")
    if not args.pools:
        raise UsageError("--engine vllm needs --pools FILE (the pool file: specdec/plan/vllm/pool_spec.py)")
    pools = load_pool_file(args.pools)
    artifacts = {"draft_model": args.draft_model, "eagle": args.eagle_head, "eagle3": args.eagle3_head}
    cands = parse_candidates(args.candidates or default_candidates(artifacts, mtp=bool(args.mtp)), artifacts)
    out = Path(args.out)
    source, command = _source(args, out / "logs")
    engine = _engine_facts(args, command)
    settings = PlanSettings(cands, engine, Thresholds(tolerance=args.tolerance), levels=args.levels or 6,
                            sim_requests=args.requests, replications=args.replications, seed=args.seed,
                            gap=args.gap or 0.012, start_timeout=args.start_timeout or 900.0,
                            request_timeout=args.request_timeout or 300.0, schedules=not args.no_schedules,
                            bursts=args.bursts or PlanSettings.bursts, drift_check=not args.no_drift_check,
                            target=_target(args, command), dtype=command.option("--dtype") if command else None)
    if settings.levels < 2:
        raise UsageError("--levels must be >= 2")
    log(f"plan for {len(pools)} pools, {len(cands)} candidates: {', '.join(c.name for c in cands)}")
    result = plan_vllm(pools, settings, source, out, log=log)
    path = write(result, out, serve=None if command is None else command.text,
                 servers=None if args.server is None else dict(args.server))
    for name, o in result.pools.items():
        print(f"{name}: {o.decision.sentence}\n  speculative_config: {out / f'{name}.speculative_config.json'}")
    print(f"report: {path}")
    return 0


def run_replay(args) -> int:
    from ..plan.vllm.recorded import replay
    from ..plan.vllm.summary import write

    check_flags(args, "vllm")
    given = [flag for dest, flag in RECORDED.items() if getattr(args, dest, None) not in (None, False, [])]
    if args.model not in (None, "default"):
        given.append("--model")
    if given:
        raise UsageError(f"{', '.join(given)} {'comes' if len(given) == 1 else 'come'} from the record with --replay")
    if args.levels is not None and args.levels < 2:
        raise UsageError("--levels must be >= 2")
    overrides = {key: getattr(args, dest) for key, dest in (("levels", "levels"), ("sim_requests", "requests"),
                                                            ("replications", "replications"), ("seed", "seed"))
                 if getattr(args, dest) is not None}
    out = Path(args.out)
    try:
        rec, result = replay(args.replay, out, overrides, log=log)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    path = write(result, out, serve=rec.serve, servers=rec.servers)
    for note in rec.notes:
        print(f"note: {note}")
    for name, o in result.pools.items():
        print(f"{name}:\n  recorded: {rec.decisions[name]}\n  today:    {o.decision.sentence}\n"
              f"  speculative_config: {out / f'{name}.speculative_config.json'}")
        for cand, why in o.skipped.items():
            print(f"  {cand} left out: {why}")
    print(f"report: {path}")
    return 0


def add_review_args(r: argparse.ArgumentParser) -> None:
    r.add_argument("--engine", choices=("specdec", "vllm"), default="specdec",
                   help="specdec: re-measure a specdec plan; vllm: review a vLLM plan's speculative_configs")
    add_server_args(r)
    r.add_argument("--pools", default=None, help="engine vllm: the pool file now (default: the plan's pools, "
                   "rebuilt from its record): a moved traffic mix is compared with the plan's")
    r.add_argument("--requests", type=positive_int, default=None,
                   help="engine vllm: requests per pool in the re-measured sample (default 12)")
    r.add_argument("--seed", type=non_negative_int, default=None, help="engine vllm: arrival seed (default 0)")


REVIEW_VLLM_ONLY = {"serve": "--serve", "server": "--server", "server_env": "--server-env", "pools": "--pools",
                    "requests": "--requests", "seed": "--seed", "start_timeout": "--start-timeout",
                    "request_timeout": "--request-timeout", "gap": "--gap"}


def check_review_flags(args) -> None:
    """``specdec review`` without ``--engine vllm``: refuse the vLLM review's flags by name."""
    given = [flag for dest, flag in REVIEW_VLLM_ONLY.items() if getattr(args, dest, None) not in (None, False, [])]
    if given:
        raise UsageError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --engine vllm")


def run_review(args) -> int:
    from ..plan.vllm.pool_spec import load_pool_file, pool_from_description
    from ..plan.vllm.record import load_record
    from ..plan.vllm.recheck import review_vllm, write_review

    if args.tolerance is not None:
        raise UsageError("--tolerance does not apply to --engine vllm: the review applies the plan's recorded "
                         "thresholds")
    record = load_record(args.report)
    base = Path(args.report) if Path(args.report).is_dir() else Path(args.report).parent
    pools = (load_pool_file(args.pools) if args.pools else
             {n: pool_from_description(p["pool"]) for n, p in record["pools"].items()})
    out = Path(args.out) if args.out else base
    source, command = _source(args, out / "review_logs", record.get("serve"))
    target = args.model if args.model else (command.model() if command else record["target"]["model"])
    findings, verdicts, version, notes = review_vllm(record, pools, source, target=target, requests=args.requests or 12,
                                              seed=args.seed or 0, timeout=args.request_timeout or 300.0,
                                              gap=args.gap or 0.012, log=log)
    path = write_review(out, findings, verdicts, version, notes)
    print(path.read_text())
    return 0 if all(v.verdict == "keep" for v in verdicts) else 1

