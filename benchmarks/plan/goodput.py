"""Real load vs the simulator: the batched SpeculativeDecoder at several concurrency levels.

What it checks: that ``specdec.plan``'s simulator, fed only with measurements taken *before*
the speculative runs (a step-time calibration of the target on this machine and acceptance
histograms replayed on the target's own greedy outputs), predicts the goodput and median time
per output token of real runs within 15%.

Protocol, all in one process on the embedded SmolLM2-135M (fp32, CPU):

1. calibrate the step-time model through the engine's own verify path (short grid around the
   workload's context lengths);
2. **off**: plain decoding through the SpeculativeDecoder, ``rounds`` static batches of
   ``c`` requests per concurrency level ``c`` (each batch starts together; requests leave as
   they finish). Its outputs are the target's greedy outputs;
3. replay the suffix proposer on those outputs -> acceptance + drafted-node histograms per category;
4. **always**: the suffix proposer at a fixed draft budget; **gated**: the same, with a
   :class:`~specdec.control.load_gate.LoadGate` switching the decoder's budget per step from the live batch
   size (threshold from the cost model: the batch above which drafting stops paying);
5. simulate the same batches (same prompts and output lengths, all arriving at t=0, max batch c)
   under each policy and compare.

    nice python -m benchmarks.plan.goodput                       # a few minutes on 2 idle cores
    nice python -m benchmarks.plan.goodput --concurrency 1,4 --requests 4 --max-new-tokens 24   # quick

torch runs single-threaded by default (``--threads``): on a machine shared with other jobs,
one thread per process gives far steadier timings than oversubscribed thread pools, and the
calibration and the runs must see the same conditions.

Writes ``benchmarks/results/goodput/{results.json,results.md,goodput_real_vs_sim.png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common.paths import RESULTS, SAMPLE_PROMPTS
from specdec.engine.decoder import SpeculativeDecoder
from specdec.models import load_default
from specdec.proposers.suffix import SuffixProposer
from specdec.estimate.acceptance import AcceptanceDist
from specdec.measure.greedy_replay import measure_by_replay
from specdec.measure.step_timing import calibrate_engine
from specdec.control.interface import BatchView, Outcome
from specdec.control.load_gate import BudgetOptimizer, LoadGate
from specdec.plan.goodput import SLO, RequestRecord, summarize
from specdec.plan.policies import AlwaysOn, Off, gated, hysteresis_band
from specdec.plan.simulator import ServerConfig, simulate
from specdec.prompts import encode_first_turn, read_prompt_records
from specdec.plan.workload import SimRequest, WorkloadItem

DEFAULT_CATEGORIES = "summarization,rag,translation,coding,qa,extraction"


def real_batch(
    decoder: SpeculativeDecoder, prompts, max_new: int, gate: LoadGate | None, t_offset: float, first_id: int
):
    """Run one static batch; return per-request records (clock starts at ``t_offset``) and outputs."""
    n = len(prompts)
    first, finish, out = {}, {}, {i: [] for i in range(n)}
    last_counts = {}
    final_metrics = []
    active, seen, done_in_step = n, 0, 0
    step_drafted = step_accepted = 0
    if gate is not None:
        gate.reset()
        decoder.budget = gate.decide(BatchView(n)).budget
    start = time.perf_counter()
    for ev in decoder.run(prompts, max_new):
        now = time.perf_counter() - start + t_offset
        first.setdefault(ev.index, now)
        out[ev.index].extend(ev.tokens)
        m = ev.metrics
        d0, a0 = last_counts.get(ev.index, (0, 0))
        step_drafted += m.drafted - d0
        step_accepted += m.accepted - a0
        last_counts[ev.index] = (m.drafted, m.accepted)
        if ev.finished:
            finish[ev.index] = now
            final_metrics.append(m)
            done_in_step += 1
        seen += 1
        if seen == active:  # every active request has reported: the step is over
            active -= done_in_step
            seen = done_in_step = 0
            if gate is not None and active:
                gate.observe(Outcome.of([step_drafted], [min(step_accepted, step_drafted)]))
                decoder.budget = gate.decide(BatchView(active)).budget
            step_drafted = step_accepted = 0
    records = [RequestRecord(first_id + i, t_offset, first[i], finish[i], len(out[i])) for i in range(n)]
    return records, [out[i] for i in range(n)], time.perf_counter() - start, final_metrics


def run_real(decoder, batches, max_new, gate=None):
    """All batches one after another; also the decoder's own per-step phase times (ms, mean over requests)."""
    records, outputs, t, metrics = [], [], 0.0, []
    for bi, batch in enumerate(batches):
        recs, outs, dt, ms = real_batch(decoder, [p for p, _ in batch], max_new, gate, t, bi * 1000)
        records += recs
        outputs += outs
        metrics += ms
        t += dt
    steps = [m for m in metrics if m.steps]
    phases = {
        k: 1e3 * float(np.mean([getattr(m, f"{k}_s") / m.steps for m in steps])) if steps else 0.0
        for k in ("propose", "verify", "accept")
    }
    return records, outputs, phases


def run_sim(batches, out_lens, policy, server_kwargs, c):
    records, t, k = [], 0.0, 0
    for bi, batch in enumerate(batches):
        reqs = []
        for i, (p, cat) in enumerate(batch):
            reqs.append(SimRequest(bi * 1000 + i, 0.0, WorkloadItem(len(p), out_lens[k], cat)))
            k += 1
        res = simulate(reqs, policy, ServerConfig(max_batch=c, **server_kwargs))
        for r in res.records:
            records.append(
                RequestRecord(r.rid, r.arrival + t, r.first_token + t, r.finish + t, r.output_tokens, r.category)
            )
        t = max(r.finish for r in records)
    return records, t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--requests", type=int, default=4, help="requests per concurrency level (rounds = requests / c)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (see the module docstring)")
    ap.add_argument("--budget", type=int, default=6, help="draft budget of the always-on and gated runs")
    ap.add_argument("--categories", default=DEFAULT_CATEGORIES)
    ap.add_argument("--ttft", type=float, default=3.0)
    ap.add_argument("--tpot", type=float, default=0.15)
    ap.add_argument("--repeats", type=int, default=2, help="calibration repeats per point")
    ap.add_argument("--out", default=str(RESULTS / "goodput"))
    args = ap.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    slo = SLO(args.ttft, args.tpot)
    torch.set_num_threads(args.threads)
    t_all = time.perf_counter()
    load0 = os.getloadavg()

    model, tok = load_default()
    torch.manual_seed(0)
    recs = read_prompt_records(SAMPLE_PROMPTS, categories=args.categories.split(","))
    pool = [(encode_first_turn(tok, r), r["category"]) for r in recs]
    # interleave categories so every batch mixes good and bad cases for lookup drafting
    by_cat = {}
    for p, c in pool:
        by_cat.setdefault(c, []).append((p, c))
    mixed = [x for group in zip(*by_cat.values()) for x in group]
    prompts = [mixed[i % len(mixed)] for i in range(args.requests)]
    plens = [len(p) for p, _ in prompts]
    print(f"{len(prompts)} prompts, lengths {min(plens)}..{max(plens)} (mean {np.mean(plens):.0f}); load avg {load0}")

    t0 = time.perf_counter()
    ctx_hi = max(plens) + args.max_new_tokens
    cost = calibrate_engine(
        model,
        batches=sorted({1, 2} | set(levels)),
        tokens=(1, 3, 1 + args.budget),
        contexts=(64, int(np.mean(plens)), ctx_hi),
        prefills=(64, int(np.mean(plens)), max(plens)),
        repeats=args.repeats,
        meta={"target": "SmolLM2-135M-Instruct"},
    )
    cost.save(out / "cost.json")
    print(
        f"calibration {time.perf_counter() - t0:.0f}s: mean error {cost.mean_rel_error:.1%}, "
        f"leave-one-out {cost.loo_rel_error:.1%}, {len(cost.outliers)} disturbed timings set aside"
    )

    rows = []
    acceptance = None
    for c in levels:
        batches = [prompts[i : i + c] for i in range(0, len(prompts), c)]
        off_dec = SpeculativeDecoder(model, None)
        real_off, outputs, ph_off = run_real(off_dec, batches, args.max_new_tokens)
        if acceptance is None:
            cats = [cat for _, cat in prompts]
            per_cat = {}
            for cat in sorted(set(cats)):
                idx = [i for i, x in enumerate(cats) if x == cat]
                per_cat[cat] = measure_by_replay(
                    SuffixProposer(model.config.vocab_size),
                    {i: prompts[i][0] for i in idx},
                    {i: outputs[i] for i in idx},
                    args.budget,
                    f"suffix/{cat}",
                )
            per_cat["all"] = AcceptanceDist.merge(list(per_cat.values()), "suffix/all")
            acceptance = per_cat
            opt = BudgetOptimizer(cost, acceptance["all"])
            threshold = opt.crossover_batch(args.budget, float(np.mean(plens)) + args.max_new_tokens / 2)
            print(
                "replayed acceptance (mean accepted/step at budget "
                f"{args.budget}): "
                + ", ".join(f"{k} {v.expected_accepted(args.budget):.2f}" for k, v in per_cat.items())
                + f"; gate threshold: batch {threshold}"
            )
        out_lens = [len(o) for o in outputs]
        server_kwargs = dict(cost=cost, acceptance=acceptance, padded_context=True)
        spec_dec = SpeculativeDecoder(
            model, SuffixProposer(model.config.vocab_size), max_budget=args.budget, budget=args.budget
        )
        real_on, _, ph_on = run_real(spec_dec, batches, args.max_new_tokens)
        gate = LoadGate(off_above=max(threshold, 0), on_below=hysteresis_band(max(threshold, 0)), budget=args.budget)
        gated_dec = SpeculativeDecoder(
            model, SuffixProposer(model.config.vocab_size), max_budget=args.budget, budget=args.budget
        )
        real_gated, _, ph_gated = run_real(gated_dec, batches, args.max_new_tokens, gate)
        sims = {
            "off": Off(),
            "always": AlwaysOn(args.budget),
            "gated": gated(max(threshold, 0), args.budget, hysteresis_band(max(threshold, 0))),
        }
        for name, real, ph in (("off", real_off, ph_off), ("always", real_on, ph_on), ("gated", real_gated, ph_gated)):
            sim_recs, _ = run_sim(batches, out_lens, sims[name], server_kwargs, c)
            r, s = summarize(real, slo), summarize(sim_recs, slo)
            row = {
                "concurrency": c,
                "policy": name,
                "real_goodput": r["goodput_rps"],
                "sim_goodput": s["goodput_rps"],
                "real_tpot_p50": r["tpot_p50"],
                "sim_tpot_p50": s["tpot_p50"],
                "real_tok_s": r["throughput_tok_s"],
                "sim_tok_s": s["throughput_tok_s"],
                "real_ttft_p50": r["ttft_p50"],
                "sim_ttft_p50": s["ttft_p50"],
                "real_step_ms": ph,
            }
            row["goodput_err"] = (
                (s["goodput_rps"] - r["goodput_rps"]) / r["goodput_rps"] if r["goodput_rps"] else float("nan")
            )
            row["tpot_err"] = (s["tpot_p50"] - r["tpot_p50"]) / r["tpot_p50"]
            rows.append(row)
            print(
                f"c={c} {name:6s} goodput real {r['goodput_rps']:.3f} sim {s['goodput_rps']:.3f} "
                f"({row['goodput_err']:+.0%})  "
                f"tpot50 real {r['tpot_p50'] * 1e3:.0f}ms sim {s['tpot_p50'] * 1e3:.0f}ms ({row['tpot_err']:+.0%})  "
                f"tok/s real {r['throughput_tok_s']:.1f} sim {s['throughput_tok_s']:.1f}  "
                f"decoder ms/step propose {ph['propose']:.1f} verify {ph['verify']:.1f} accept {ph['accept']:.1f}",
                flush=True,
            )

    load1 = os.getloadavg()
    total = time.perf_counter() - t_all
    within = [
        abs(r["tpot_err"]) <= 0.15 and (np.isnan(r["goodput_err"]) or abs(r["goodput_err"]) <= 0.15) for r in rows
    ]
    summary = {
        "args": vars(args),
        "load_avg_start": load0,
        "load_avg_end": load1,
        "seconds": total,
        "cost_model": {
            "mean_rel_error": cost.mean_rel_error,
            "loo_rel_error": cost.loo_rel_error,
            "outliers": len(cost.outliers),
        },
        "acceptance": {k: v.to_dict() for k, v in acceptance.items()},
        "rows": rows,
        "within_15pct": f"{sum(within)}/{len(within)}",
    }
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    lines = [
        f"# Real load vs simulator (SmolLM2-135M, CPU, {args.requests} requests per level, {args.max_new_tokens} new "
        "tokens)",
        "",
        f"SLO: TTFT <= {args.ttft}s, TPOT <= {args.tpot * 1e3:g} ms. Load average {load0[0]:.1f} -> {load1[0]:.1f} "
        f"(shared machine). Cost-model fit error {cost.mean_rel_error:.1%} (leave-one-out {cost.loo_rel_error:.1%}).",
        "",
        "| concurrency | policy | goodput real | sim | err | p50 TPOT real (ms) | sim | err | tok/s real | sim | "
        "decoder ms/step: propose / verify / accept |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['concurrency']} | {r['policy']} | {r['real_goodput']:.3f} | {r['sim_goodput']:.3f} | "
            f"{r['goodput_err']:+.0%} | "
            f"{r['real_tpot_p50'] * 1e3:.0f} | {r['sim_tpot_p50'] * 1e3:.0f} | {r['tpot_err']:+.0%} | "
            f"{r['real_tok_s']:.1f} | {r['sim_tok_s']:.1f} | "
            f"{r['real_step_ms']['propose']:.1f} / {r['real_step_ms']['verify']:.1f} / "
            f"{r['real_step_ms']['accept']:.1f} |"
        )
    lines += ["", f"Within 15% on both: {summary['within_15pct']} rows. Total {total:.0f}s."]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot(rows, levels, out / "goodput_real_vs_sim.png")
    print("\n".join(lines))


def plot(rows, levels, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for policy, color in (("off", "C0"), ("always", "C1"), ("gated", "C2")):
        rs = [r for r in rows if r["policy"] == policy]
        x = [r["concurrency"] for r in rs]
        axes[0].plot(x, [r["real_tok_s"] for r in rs], "o-", color=color, label=f"{policy} real")
        axes[0].plot(x, [r["sim_tok_s"] for r in rs], "x--", color=color, label=f"{policy} sim")
        axes[1].plot(x, [r["real_tpot_p50"] * 1e3 for r in rs], "o-", color=color, label=f"{policy} real")
        axes[1].plot(x, [r["sim_tpot_p50"] * 1e3 for r in rs], "x--", color=color, label=f"{policy} sim")
    axes[0].set_ylabel("throughput (tokens/s)")
    axes[1].set_ylabel("p50 time per output token (ms)")
    for ax in axes:
        ax.set_xlabel("concurrent requests")
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(v) for v in levels])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("SmolLM2-135M on this CPU: measured (o) vs simulated (x)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
