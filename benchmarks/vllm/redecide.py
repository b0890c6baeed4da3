"""A recorded vLLM plan decided again by today's rule: what a change to ``decide.py`` does to a past plan.

Reads a plan's ``plan.json`` (``specdec plan --engine vllm`` writes it, ``plan_goodput.py`` in
``<out>/plan/``) and runs :func:`specdec.plan.vllm.decide.decide` on its recorded predictions,
greedy-exactness, thresholds (thresholds added since the record take their defaults) and the loss at
an overload its bursts could tell from noise (``overload_noise``; 0 in a plan of one burst a
candidate, or ``--overload-floor`` for every pool), printing each pool's recorded decision, the new
one, and every candidate's assessment. Nothing is measured.
The calibrations and per-candidate batch bounds are not in the record, so a "speculate" sentence
omits the acceptance and names no batch bound; which candidate is chosen does not depend on them.

    python -m benchmarks.vllm.redecide benchmarks/results/vllm-plan-goodput/plan/plan.json
    python -m benchmarks.vllm.redecide benchmarks/results/vllm-cli-plan-inter/plan.json --overload-floor 0.12
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def redecide(plan: dict, overload_floor: float | None = None) -> dict:
    """``{pool: (recorded sentence, Decision)}`` for a loaded ``plan.json``, each pool at its recorded
    overload floor or at ``overload_floor``; ValueError naming what is missing or not a candidate a
    plan writes."""
    from specdec.plan.vllm.decide import Thresholds, decide
    from specdec.plan.vllm.recheck import candidate_of

    try:
        thresholds = Thresholds(**plan["thresholds"])
        max_rows = plan["engine"]["max_num_seqs"]
        out = {}
        for name, o in plan["pools"].items():
            cands = {c: candidate_of(config, c) for c, config in o["candidates"].items()}
            floor = o.get("overload_noise", {}).get("floor", 0.0) if overload_floor is None else overload_floor
            out[name] = (o["decision"], decide(name, o["pool"]["objective"], cands, o["predictions"], {}, o["exact"],
                                               {}, thresholds, max_rows, overload_floor=floor))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a plan.json that specdec plan --engine vllm writes: missing {exc}") from None
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path, help="a plan.json")
    ap.add_argument("--overload-floor", type=float, default=None,
                    help="the loss at an overload every pool's bursts are taken to tell from noise (default: the "
                         "record's)")
    args = ap.parse_args(argv)
    if args.overload_floor is not None and not 0 <= args.overload_floor < 1:
        ap.error(f"--overload-floor must be in [0, 1), got {args.overload_floor}")
    try:
        decided = redecide(json.loads(args.plan.read_text()), args.overload_floor)
    except (OSError, ValueError) as exc:
        ap.error(f"{args.plan}: {exc}")
    for name, (recorded, d) in decided.items():
        print(f"## {name}\n\nrecorded: {recorded}\nnow:      {d.sentence}\n")
        for a in d.assessments.values():
            print(f"- {a.name}: worst {a.worst_vs_off:.2f}x off; {'eligible' if a.eligible else a.why_not}")
        print()


if __name__ == "__main__":
    main()
