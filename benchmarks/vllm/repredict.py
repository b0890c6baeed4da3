"""A recorded goodput benchmark predicted again: what a change to the step-cost fit does to its predictions.

Reads a ``plan_goodput.py`` output folder (``plan/plan.json``, the plan's ``plan/runs/`` ramps and
bursts, the measured runs in ``measured/``, and ``plan_goodput.json`` for which candidate each
configuration was) and predicts every measured run twice from the same recorded steps: from the
ramp's fit alone, and with each burst's decode steps in the fit (:func:`~specdec.plan.vllm.
calibrate.with_bursts`), a table in both from its family's fit as the plan predicts it
(:func:`~specdec.plan.vllm.run_plan.model_of`). Nothing is measured; each row is one measured run,
with how many of its requests lie within 10% of an objective (:func:`~specdec.plan.goodput.
near_objective`): each can cross it on a step-time error that size, so a run's error is read
against them.
``--steps`` prints instead, for every recorded burst of an off or static candidate, its median
decode step at each batch size it ran (at least 3 steps) beside both fits' step at that size
(needs only ``plan/runs``, so it reads plans recorded before ``measured/`` was kept).

    python -m benchmarks.vllm.repredict benchmarks/results/vllm-plan-goodput-r9i
    python -m benchmarks.vllm.repredict --steps benchmarks/results/vllm-plan-goodput-r8b
    python -m benchmarks.vllm.repredict benchmarks/results/vllm-plan-goodput-r11i \
        --runs benchmarks/results/vllm-knee05-r11i

``--time-split`` prints instead, per run, the seconds its steps spent with and without a prompt
finishing in them, each total as the plan's fit and the run's own fit predict it, and what the
run's own calibration predicts its score to be (:func:`time_split`).

``--acceptance`` prints instead each ramp's accepted tokens per decode row-step and per drafting
one (:func:`ramp_acceptance`).

``--prefill-residuals`` prints instead the runs' prefill steps against their own fits, grouped by
prompts a step and by the run's first 45 s (:func:`prefill_residuals`).

``--runs`` predicts instead the runs a ``schedule_tax.py`` served at another load (same pool, prompts
and server settings) from this folder's plan: a load the benchmark did not measure, checked
without planning again.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _load(path: Path):
    from specdec.plan.vllm.measure import PoolRun

    return PoolRun.from_dict(json.loads(path.read_text()))


def models(plan_dir: Path, pool: str, cands: dict, burst_fit: bool, engine) -> dict:
    """``{candidate: StepModels}`` for every candidate the plan measured on ``pool`` (``engine``: the
    plan's server limits)."""
    from specdec.plan.vllm.calibrate import calibrate, with_bursts
    from specdec.plan.vllm.run_plan import burst_files, model_of, run_file, table_basis
    from specdec.plan.vllm.schedule import family_basis

    cals = {}
    for name, cand in cands.items():
        ramp = run_file(plan_dir, name, pool)
        if not ramp.exists():
            continue
        cals[name] = with_bursts(calibrate(_load(ramp), engine=engine),
                                 [_load(b) for b in burst_files(plan_dir, name, pool)],
                                 fit=burst_fit and cand.schedule is None, engine=engine)
    basis = {}
    for name, cand in cands.items():
        if cand.schedule is None or name not in cals:
            continue
        family = {c.k: cals[n] for n, c in cands.items()
                  if c.family == cand.family and c.schedule is None and n in cals}
        basis[name] = table_basis(cand, family_basis(family), cals[name], cals["off"])
    return {name: model_of(name, cals, basis) for name in cals}


def burst_steps(plan_dir: Path) -> list[dict]:
    """One row per recorded burst of an off or static candidate and batch size it ran at least 3
    times: the measured median decode step and the ramp's and the ramp-plus-burst fit's (seconds)."""
    from specdec.plan.vllm.calibrate import DEFAULT_GAP, calibrate, decode_steps, with_bursts
    from specdec.plan.vllm.engine_trace import Engine
    from specdec.plan.vllm.schedule import mean_context, step_seconds

    engine = Engine(**json.loads((plan_dir / "plan.json").read_text())["engine"])
    rows = []
    for path in sorted((plan_dir / "runs").glob("*__burst*.json")):
        name, pool = path.stem.split("__")[:2]
        if name.endswith("-sched"):  # a table drafts at some sizes only: one fit cannot say which
            continue
        burst = _load(path)
        ramp = calibrate(_load(path.with_name(f"{name}__{pool}.json")), engine=engine)
        both = with_bursts(ramp, [burst], engine=engine)
        context = mean_context(ramp)
        for size, steps in decode_steps(burst, DEFAULT_GAP, engine).items():
            if len(steps) >= 3:
                rows.append({"pool": pool, "candidate": name, "rows": size,
                             "measured": statistics.median(s for s, _ in steps),
                             "ramp_fit": step_seconds(ramp, size, context),
                             "burst_fit": step_seconds(both, size, context)})
    return rows


def plan_dir(out: Path) -> Path:
    """The plan folder of ``out``: a ``plan_goodput.py`` folder's ``plan/``, or ``out`` itself when it is
    a plan (``specdec plan --engine vllm --out``)."""
    return out / "plan" if (out / "plan" / "plan.json").is_file() else out


def drift_of(pool_record: dict):
    """The drift a plan measured on a pool (:class:`~specdec.plan.vllm.drift.Drift`; not measured in a
    plan recorded before the check): predictions here widen their band by it, as the plan's do."""
    from specdec.plan.vllm.drift import NOT_MEASURED, Drift

    return Drift(**pool_record["drift"]) if "drift" in pool_record else NOT_MEASURED


def _plan_runs(out: Path, runs: Path | None):
    """``(Engine, [(pool, its plan record, {name: Candidate}, its runs as found)])`` for every pool of
    ``out``'s plan with a measured run (``out/measured``, or ``runs``' ``schedule_tax.py`` runs) of a
    candidate it planned."""
    from specdec.plan.vllm.engine_trace import Engine
    from specdec.plan.vllm.recheck import candidate_of

    plan = json.loads((plan_dir(out) / "plan.json").read_text())
    found = _measured(out, plan["pools"]) if runs is None else _served(runs)
    pools = []
    for pool, o in plan["pools"].items():
        cands = {n: candidate_of(c, n) for n, c in o["candidates"].items()}
        here = [f for f in found if f[0] == pool and f[4] in cands]
        if here:
            pools.append((pool, o, cands, here))
    return Engine(**plan["engine"]), pools


def time_split(out: Path, runs: Path | None = None) -> list[dict]:
    """Per measured run (as :func:`repredict` finds them): its steps' measured seconds with and
    without a prompt finishing in them (``prefill_s``, ``decode_s``), the plan's fit (with the bursts)
    and the run's own fit (:func:`~specdec.plan.vllm.calibrate.calibrate`) as predicted / measured
    totals of each, and the run predicted from its own calibration (``own_predicted``, with its median
    TTFT and TPOT beside the measured ones, ``own_*`` and ``measured_*``), and again with that fit
    scaled by ``own_total`` (the run's measured seconds over the fit's, every step) to ``own_rescaled``:
    whether a miss lies in what the plan measured, in how the steps were fitted, or in the schedule."""
    from specdec.plan.goodput import SLO
    from specdec.plan.vllm.calibrate import calibrate, run_samples
    from specdec.plan.vllm.predict import predict_run, score_run

    engine, pools = _plan_runs(out, runs)
    rows = []
    for pool, o, cands, here in pools:
        planned = models(plan_dir(out), pool, cands, True, engine)
        slo, objective = SLO(o["pool"]["ttft_s"], o["pool"]["tpot_s"]), o["pool"]["objective"]
        for _, label, rate, rep, name, run in here:
            steps = run_samples(run, engine=engine)
            decode = {(s.terms, s.seconds) for s in run_samples(run, decode_only=True, engine=engine)}
            parts = {"decode": [s for s in steps if (s.terms, s.seconds) in decode],
                     "prefill": [s for s in steps if (s.terms, s.seconds) not in decode]}
            own = calibrate(run, engine=engine)
            seconds = {part: sum(s.seconds for s in ss) for part, ss in parts.items()}
            fitted = {(fit, part): sum(float(s.work() @ w) for s in ss) for part, ss in parts.items()
                      for fit, w in (("plan", planned[name].cost.weights), ("own", own.cost.weights))}
            total = sum(seconds.values()) / (fitted["own", "prefill"] + fitted["own", "decode"])
            measured = score_run(run, slo, objective)
            predicted = predict_run(cands[name], own.cost, own.acceptance, run, run.cache.tokens, engine, slo,
                                    objective, band=0.0)
            rescaled = predict_run(cands[name], own.cost.scaled(total), own.acceptance, run, run.cache.tokens,
                                   engine, slo, objective, band=0.0)
            row = {"pool": pool, "config": label, "rate": float(rate), "run": int(rep),
                   "measured": measured["score"], "own_predicted": predicted["score"],
                   "own_total": total, "own_rescaled": rescaled["score"],
                   **{f"{who}_{k}": d[k] for who, d in (("measured", measured), ("own", predicted))
                      for k in ("ttft_p50", "tpot_p50")},
                   **{f"{part}_s": sec for part, sec in seconds.items()},
                   **{f"{fit}_{part}": fitted[fit, part] / seconds[part] if seconds[part] else float("nan")
                      for fit, part in fitted}}
            rows.append(row)
    return rows


def prefill_residuals(out: Path, runs: Path | None = None, early_s: float = 45.0) -> list[dict]:
    """Per group of the measured runs' prefill steps (each step read with the plan's server limits and
    predicted by its own run's fit): by prompts computed in the step (1, 2, 3, 4+) and by whether it
    ended in the run's first ``early_s`` seconds, the steps, and measured / predicted seconds in total.
    Padded prefills would put the multi-prompt groups above 1; a fresh server's slow start, the early one."""
    from specdec.plan.vllm.calibrate import calibrate
    from specdec.plan.vllm.engine_trace import Stream, busy_between, engine_steps, prefill_chunks

    engine, pools = _plan_runs(out, runs)
    groups: dict[str, list[float]] = {}
    for _, _, _, here in pools:
        for *_, run in here:
            w = calibrate(run, engine=engine).cost
            trace = [Stream(r.sent, int(r.prompt_tokens), r.chunk_times) for r in run.streams]
            steps, at, untimed = engine_steps(trace, 0.012)
            chunks = prefill_chunks(trace, steps, at, engine)
            for k in range(1, len(steps)):
                if k in untimed or not chunks[k] or not busy_between(trace, at[k - 1], at[k]):
                    continue
                pieces = [(1, trace[i].prompt_len + j) for i, j in steps[k] if j > 0]
                pieces += [(m, c) for _, m, c in chunks[k]]
                for key in (f"{min(len(chunks[k]), 4)}{'+' if len(chunks[k]) >= 4 else ''} prompt(s)",
                            "first %.0f s" % early_s if at[k] - trace[0].sent < early_s else "later"):
                    g = groups.setdefault(key, [0, 0.0, 0.0])
                    g[0] += 1
                    g[1] += at[k] - at[k - 1]
                    g[2] += w.packed_step_time(pieces)
    return [{"group": key, "steps": n, "ratio": y / p} for key, (n, y, p) in sorted(groups.items())]


def ramp_acceptance(plan: Path) -> list[dict]:
    """Per ramp of a plan folder's ``runs/`` (bursts and drift checks left out): decode row-steps, those
    with a draft, and accepted tokens per row-step and per drafting row-step, as the plan calibrates them."""
    from specdec.plan.vllm.calibrate import calibrate
    from specdec.plan.vllm.engine_trace import Engine

    engine = Engine(**json.loads((plan / "plan.json").read_text())["engine"])
    rows = []
    for path in sorted((plan / "runs").glob("*__*.json")):
        if path.stem.count("__") != 1:
            continue
        cal = calibrate(_load(path), engine=engine)
        rows.append({"run": path.stem, "row_steps": cal.row_steps, "drafts": cal.drafts,
                     "per_row_step": cal.accepted_per_row_step, "per_draft": cal.accepted_per_draft})
    return rows


def _measured(out: Path, pools) -> list[tuple]:
    """``(pool, label, rate, run index, candidate, PoolRun)`` of every run in ``out/measured``, the
    candidate read from ``plan_goodput.json``'s labels."""
    labels = {(r["pool"], r["config"]): r["candidate"] for r in json.loads((out / "plan_goodput.json").read_text())
              ["rows"] if "candidate" in r}
    found = []
    for pool in pools:
        for path in sorted((out / "measured").glob(f"{pool}__*.json")):
            _, label, rate, rep = path.stem.split("__")
            name = next(n for (p, lab), n in labels.items() if p == pool and lab.replace(":", "-").replace("=", "-")
                        == label)
            found.append((pool, label, rate, rep, name, _load(path)))
    return found


def _served(runs: Path) -> list[tuple]:
    """The same for a ``schedule_tax.py --out`` folder's ``runs/`` (``<config>__<rate>__<run>.json``), each
    run's pool and candidate read from the run itself."""
    found = []
    for path in sorted((runs / "runs").glob("*__*__*.json")):
        label, rate, rep = path.stem.split("__")
        run = _load(path)
        found.append((run.pool, label, rate, rep, run.candidate, run))
    return found


def repredict(out: Path, runs: Path | None = None) -> list[dict]:
    """One row per measured run (``out/measured``, or with ``runs`` the runs of that ``schedule_tax.py``
    folder, on the same pools and prompts): pool, configuration, rate, measured score, both
    predictions from ``out``'s plan with their bands (``<fit>_band``: ``(lo, hi)``, widened by the plan's
    drift, :func:`drift_of`), its ``requests`` and
    those ``near`` an objective. A run of a
    configuration the plan did not measure on its pool (``schedule_tax``'s own table) is left out."""
    from specdec.plan.goodput import SLO, near_objective
    from specdec.plan.vllm.predict import predict_run, run_records, score_run

    engine, pools = _plan_runs(out, runs)
    rows = []
    for pool, o, cands, here in pools:
        by_fit = {fit: models(plan_dir(out), pool, cands, fit, engine) for fit in (False, True)}
        slo, drift = SLO(o["pool"]["ttft_s"], o["pool"]["tpot_s"]), drift_of(o)
        for _, label, rate, rep, name, run in here:
            cand = cands[name]
            row = {"pool": pool, "config": label, "rate": float(rate), "run": int(rep),
                   "measured": score_run(run, slo, o["pool"]["objective"])["score"],
                   "requests": len(run.streams), "near": near_objective(run_records(run), slo)}
            for fit, ms in by_fit.items():
                m = ms[name]
                got = predict_run(cand, m.cost, m.acceptance, run, run.cache.tokens, engine, slo,
                                  o["pool"]["objective"], no_draft=m.no_draft, band=drift.band(m.cost.error_band()))
                key = "burst_fit" if fit else "ramp_fit"
                row[key], row[f"{key}_band"] = got["score"], (got["lo"], got["hi"])
            rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a plan_goodput.py --out folder holding measured/, or with --runs a plan "
                    "folder (specdec plan --engine vllm --out)")
    ap.add_argument("--steps", action="store_true", help="the bursts' decode steps against both fits")
    ap.add_argument("--time-split", action="store_true",
                    help="each run's prefill and decode time against the plan's fit and its own (time_split)")
    ap.add_argument("--prefill-residuals", action="store_true",
                    help="the runs' prefill steps, measured / their own fit, by prompts a step and early or late")
    ap.add_argument("--acceptance", action="store_true",
                    help="each ramp of the plan: accepted tokens per decode row-step and per drafting one")
    ap.add_argument("--runs", type=Path, default=None,
                    help="a schedule_tax.py --out folder: predict its runs from OUT's plan instead of OUT's own")
    args = ap.parse_args(argv)
    if args.steps:
        if not (args.out / "plan" / "runs").is_dir():
            ap.error(f"{args.out} has no plan/runs/ folder (plan_goodput.py writes the plan's runs there)")
        print("| pool | candidate | running requests | measured step (ms) | ramp's fit | with the bursts |")
        print("|---|---|---:|---:|---:|---:|")
        for r in burst_steps(args.out / "plan"):
            print(f"| {r['pool']} | {r['candidate']} | {r['rows']} | {r['measured'] * 1e3:.0f} | "
                  f"{r['ramp_fit'] * 1e3:.0f} | {r['burst_fit'] * 1e3:.0f} |")
        return
    if not (plan_dir(args.out) / "plan.json").is_file():
        ap.error(f"{args.out} holds no plan (plan.json, or plan/plan.json as plan_goodput.py writes it)")
    if args.acceptance:
        print("| ramp | decode row-steps | drafting | accepted / row-step | accepted / drafting row-step |")
        print("|---|---:|---:|---:|---:|")
        for r in ramp_acceptance(plan_dir(args.out)):
            print(f"| {r['run']} | {r['row_steps']} | {r['drafts']:.0f} | {r['per_row_step']:.3f} | "
                  f"{r['per_draft']:.3f} |")
        return
    if args.runs is not None and not (args.runs / "runs").is_dir():
        ap.error(f"--runs {args.runs} has no runs/ folder (schedule_tax.py writes its runs there)")
    if args.runs is None and not (args.out / "measured").is_dir():
        ap.error(f"{args.out} has no measured/ folder (plan_goodput.py writes it since 2fcd0d0)")
    if args.prefill_residuals:
        print("| prefill steps | steps | measured / own fit, in total |")
        print("|---|---:|---:|")
        for r in prefill_residuals(args.out, args.runs):
            print(f"| {r['group']} | {r['steps']} | {r['ratio']:.3f} |")
        return
    if args.time_split:
        print("| pool | configuration | rate | run | measured | its own fit predicts | scaled to its total | "
              "TTFT p50 (s): measured, own fit | TPOT p50 (s): measured, own fit | seconds with a prompt / without | "
              "plan's fit: prefill, decode | own fit: prefill, decode |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in time_split(args.out, args.runs):
            print(f"| {r['pool']} | {r['config']} | {r['rate']:.3g} | {r['run']} | {r['measured']:.3g} | "
                  f"{r['own_predicted']:.3g} | {r['own_rescaled']:.3g} (x{r['own_total']:.3f}) | "
                  f"{r['measured_ttft_p50']:.2f}, {r['own_ttft_p50']:.2f} | "
                  f"{r['measured_tpot_p50']:.3f}, {r['own_tpot_p50']:.3f} | "
                  f"{r['prefill_s']:.1f} / {r['decode_s']:.1f} | {r['plan_prefill']:.2f}x, {r['plan_decode']:.2f}x | "
                  f"{r['own_prefill']:.2f}x, {r['own_decode']:.2f}x |")
        return
    rows = repredict(args.out, args.runs)
    print("| pool | configuration | rate | run | measured | ramp's fit (error) | with the bursts (error) | "
          "requests within 10% of an objective |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    within = {"ramp_fit": 0, "burst_fit": 0}
    inside = dict(within)
    for r in rows:
        err = {k: r[k] / r["measured"] - 1 if r["measured"] else float("inf") for k in within}
        held = {k: r[f"{k}_band"][0] <= r["measured"] <= r[f"{k}_band"][1] for k in within}
        within = {k: within[k] + (abs(err[k]) <= 0.15) for k in within}
        inside = {k: inside[k] + held[k] for k in within}
        cell = {k: f"{r[k]:.3g} ({err[k]:+.0%}{'' if held[k] else ', outside its band'})" for k in within}
        print(f"| {r['pool']} | {r['config']} | {r['rate']:.3g} | {r['run']} | {r['measured']:.3g} | "
              f"{cell['ramp_fit']} | {cell['burst_fit']} | {r['near']} of {r['requests']} |")
    print(f"\nwithin 15% of the measured run: ramp's fit {within['ramp_fit']} of {len(rows)}, with the bursts "
          f"{within['burst_fit']} of {len(rows)}; inside the band: {inside['ramp_fit']} and {inside['burst_fit']}; "
          "median |error| "
          f"{statistics.median(abs(r['ramp_fit'] / r['measured'] - 1) for r in rows if r['measured']):.1%} and "
          f"{statistics.median(abs(r['burst_fit'] / r['measured'] - 1) for r in rows if r['measured']):.1%}")


if __name__ == "__main__":
    main()
