"""A recorded vLLM plan made again by today's code from the runs it measured: what a change to the
step-cost fit, the simulator or the decision does to a past plan's answer, with no server.

Reads a plan folder (``specdec plan --engine vllm --out``, or ``plan_goodput.py``'s ``<out>/plan``):
its pools, engine, thresholds and static candidates from ``plan.json`` and ``review.json``, and serves
its ``runs/`` in place of servers (:class:`~specdec.plan.vllm.run_plan.RecordedSource`). Today's
code derives the schedules again; one whose table differs from the table the record measured cannot
be replayed and is left out, named in the report. Writes a full plan to ``--out`` and prints each
pool's recorded decision beside today's.

    python -m benchmarks.vllm.replan benchmarks/results/vllm-plan-goodput-r11i/plan --out /tmp/replan-r11i
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def replan(plan_dir: Path, out: Path, log=print):
    """``(recorded plan.json, PlanResult, recorded review.json)``: the plan in ``plan_dir`` made again into
    ``out`` (simulation settings at the plan's defaults, as ``plan_goodput.py`` plans); ValueError naming a
    folder that is not a plan, or a pool whose prompts cannot be read again."""
    from specdec.plan.vllm.candidates import Candidate
    from specdec.plan.vllm.decide import Thresholds
    from specdec.plan.vllm.pool_spec import pool_from_description
    from specdec.plan.vllm.predict import Engine
    from specdec.plan.vllm.recheck import candidate_of
    from specdec.plan.vllm.run_plan import PlanSettings, RecordedSource, plan_vllm

    source = RecordedSource(plan_dir)
    try:
        plan = json.loads((plan_dir / "plan.json").read_text())
        review = json.loads((plan_dir / "review.json").read_text())
        pools = {name: pool_from_description(o["pool"]) for name, o in plan["pools"].items()}
        static: dict[str, Candidate] = {}
        for o in plan["pools"].values():
            for name, config in o["candidates"].items():
                cand = candidate_of(config, name)
                if cand.schedule is None:
                    static.setdefault(name, cand)
        levels = {len(o["rates"]) for o in plan["pools"].values()}
        settings = PlanSettings(list(static.values()), Engine(**plan["engine"]), Thresholds(**plan["thresholds"]),
                                levels=max(levels), target=review["target"]["model"])
    except (OSError, KeyError, TypeError) as exc:
        raise ValueError(f"{plan_dir}: not a folder that specdec plan --engine vllm wrote (missing {exc})") from None
    return plan, plan_vllm(pools, settings, source, out, log=log), review


def main(argv=None):
    from specdec.plan.vllm.summary import write

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path, help="a plan folder (plan.json, review.json, runs/)")
    ap.add_argument("--out", type=Path, required=True, help="where today's plan is written")
    args = ap.parse_args(argv)
    if args.out.resolve() == args.plan.resolve():
        ap.error("--out must not be the recorded plan's folder: the replay would overwrite its record")
    try:
        recorded, result, review = replan(args.plan, args.out, log=lambda msg: None)
    except ValueError as exc:
        ap.error(str(exc))
    path = write(result, args.out, serve=review.get("serve"), servers=review.get("servers"))
    for name, o in result.pools.items():
        print(f"## {name}\n\nrecorded: {recorded['pools'][name]['decision']}\ntoday:    {o.decision.sentence}\n")
        for cand, why in o.skipped.items():
            print(f"- `{cand}` left out: {why}")
        print()
    print(f"report: {path}")


if __name__ == "__main__":
    main()
