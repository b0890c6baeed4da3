"""A recorded goodput benchmark predicted again: what a change to the step-cost fit does to its predictions.

Reads a ``plan_goodput.py`` output folder (``plan/plan.json``, the plan's ``plan/runs/`` ramps and
bursts, the measured runs in ``measured/``, and ``plan_goodput.json`` for which candidate each
configuration was) and predicts every measured run twice from the same recorded steps: from the
ramp's fit alone, and with each burst's decode steps in the fit (:func:`~specdec.plan.vllm.
calibrate.with_burst`), a table in both from its family's fit as the plan predicts it
(:func:`~specdec.plan.vllm.run_plan.model_of`). Nothing is measured; each row is one measured run.

    python -m benchmarks.vllm.repredict benchmarks/results/vllm-plan-goodput-r9i
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _load(path: Path):
    from specdec.plan.vllm.measure import PoolRun

    return PoolRun.from_dict(json.loads(path.read_text()))


def models(plan_dir: Path, pool: str, cands: dict, burst_fit: bool) -> dict:
    """``{candidate: StepModels}`` for every candidate the plan measured on ``pool``."""
    from specdec.plan.vllm.calibrate import calibrate, with_burst
    from specdec.plan.vllm.run_plan import model_of
    from specdec.plan.vllm.schedule import family_basis, measured_scale, no_draft_tax

    cals = {}
    for name, cand in cands.items():
        safe = name.replace(":", "-")
        ramp = plan_dir / "runs" / f"{safe}__{pool}.json"
        if not ramp.exists():
            continue
        burst = plan_dir / "runs" / f"{safe}__{pool}__burst.json"
        cals[name] = with_burst(calibrate(_load(ramp)), _load(burst) if burst.exists() else None,
                                fit=burst_fit and cand.schedule is None)
    basis = {}
    for name, cand in cands.items():
        if cand.schedule is None or name not in cals:
            continue
        family = {c.k: cals[n] for n, c in cands.items()
                  if c.family == cand.family and c.schedule is None and n in cals}
        b = family_basis(family)
        tax = no_draft_tax(cals["off"].per_batch, cals[name].per_batch, cand)
        basis[name] = (b, measured_scale(b, cals[name], cand), tax)
    return {name: model_of(name, cals, basis) for name in cals}


def repredict(out: Path) -> list[dict]:
    """One row per measured run: pool, configuration, rate, measured score, and both predictions."""
    from specdec.plan.goodput import SLO
    from specdec.plan.vllm.predict import Engine, predict_run, score_run
    from specdec.plan.vllm.recheck import candidate_of

    plan = json.loads((out / "plan" / "plan.json").read_text())
    labels = {(r["pool"], r["config"]): r["candidate"] for r in json.loads((out / "plan_goodput.json").read_text())
              ["rows"] if "candidate" in r}
    engine = Engine(**plan["engine"])
    rows = []
    for pool, o in plan["pools"].items():
        cands = {n: candidate_of(c, n) for n, c in o["candidates"].items()}
        by_fit = {fit: models(out / "plan", pool, cands, fit) for fit in (False, True)}
        slo = SLO(o["pool"]["ttft_s"], o["pool"]["tpot_s"])
        for path in sorted((out / "measured").glob(f"{pool}__*.json")):
            _, label, rate, rep = path.stem.split("__")
            name = next(n for (p, lab), n in labels.items() if p == pool and lab.replace(":", "-").replace("=", "-")
                        == label)
            run, cand = _load(path), cands[name]
            row = {"pool": pool, "config": label, "rate": float(rate), "run": int(rep),
                   "measured": score_run(run, slo, o["pool"]["objective"])["score"]}
            for fit, ms in by_fit.items():
                m = ms[name]
                row["burst_fit" if fit else "ramp_fit"] = predict_run(
                    cand, m.cost, m.acceptance, run, run.cache.tokens, engine, slo, o["pool"]["objective"],
                    no_draft=m.no_draft)["score"]
            rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a plan_goodput.py --out folder holding measured/")
    args = ap.parse_args(argv)
    if not (args.out / "measured").is_dir():
        ap.error(f"{args.out} has no measured/ folder (plan_goodput.py writes it since 2fcd0d0)")
    rows = repredict(args.out)
    print("| pool | configuration | rate | run | measured | ramp's fit (error) | with the bursts (error) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    within = {"ramp_fit": 0, "burst_fit": 0}
    for r in rows:
        err = {k: r[k] / r["measured"] - 1 if r["measured"] else float("inf") for k in within}
        within = {k: within[k] + (abs(err[k]) <= 0.15) for k in within}
        print(f"| {r['pool']} | {r['config']} | {r['rate']:.3g} | {r['run']} | {r['measured']:.3g} | "
              f"{r['ramp_fit']:.3g} ({err['ramp_fit']:+.0%}) | {r['burst_fit']:.3g} ({err['burst_fit']:+.0%}) |")
    print(f"\nwithin 15% of the measured run: ramp's fit {within['ramp_fit']} of {len(rows)}, with the bursts "
          f"{within['burst_fit']} of {len(rows)}; median |error| "
          f"{statistics.median(abs(r['ramp_fit'] / r['measured'] - 1) for r in rows if r['measured']):.1%} and "
          f"{statistics.median(abs(r['burst_fit'] / r['measured'] - 1) for r in rows if r['measured']):.1%}")


if __name__ == "__main__":
    main()
