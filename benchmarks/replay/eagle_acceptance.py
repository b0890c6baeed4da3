"""Mean accepted tokens per step of the EAGLE-style proposer on held-out records (greedy), by category.

* **replay** (default): walks each held-out record's recorded greedy response step by step through
  the real :class:`~specdec.proposers.eagle.EagleProposer` (begin / propose / commit with the
  target's teacher-forced hidden states at every prompt and response position). Under greedy
  verification the target emits its greedy continuation whatever the draft, so the accepted length
  of a step is the longest tree path matching that continuation: what the decoder would accept,
  without running the target. Tokens per step counts the bonus token (Spec-Bench's "mean accepted
  tokens"). With ``--medusa DIR`` the committed Medusa heads are replayed on the same records in
  the same run (records Medusa was trained on are left out of its number and counted).
* ``--online N``: plain decoding vs EAGLE through :class:`~specdec.SpeculativeDecoder` on N
  held-out prompts in the same process: wall-clock ratio, outputs checked identical.

Usage (after ``specdec train eagle --out DIR``)::

    python -m benchmarks.replay.eagle_acceptance --artifact DIR \\
        --responses benchmarks/data/selfdistill-<fp>-384x256.jsonl --budgets 8 16 32 \\
        --medusa artifacts/medusa-kd-smollm2-135m --online 4 --record
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import sys

import torch

from specdec.artifacts import record_measurement
from specdec.measure.greedy_replay import replay_sequence
from specdec.measure.speedup import online_speedup
from specdec.proposers.eagle import EagleProposer
from specdec.training import data as sd
from specdec.training.eagle1 import FullSequences


def measure(prop, data: FullSequences, held: list[int], budget: int) -> dict:
    per_cat = collections.defaultdict(lambda: [0, 0])
    spent = 0.0
    for i in held:
        h, tok, P = data.sequence(i)
        r = replay_sequence(prop, tok.tolist(), P, budget, hidden=h.float())
        per_cat[data.records[i]["category"]][0] += r.emitted
        per_cat[data.records[i]["category"]][1] += r.steps
        spent += r.propose_s
    tot_e = sum(v[0] for v in per_cat.values())
    tot_s = sum(v[1] for v in per_cat.values())
    return {"overall": round(tot_e / max(tot_s, 1), 3),
            "by_category": {c: round(v[0] / max(v[1], 1), 3) for c, v in sorted(per_cat.items())},
            "steps": tot_s, "tokens": tot_e, "propose_ms": round(1000 * spent / max(tot_s, 1), 2)}


def medusa_unseen(responses: list[dict], held: list[int], directory: str) -> list[int]:
    """Held-out records Medusa did not train on (its manifest names its --max-tokens selection)."""
    from specdec.artifacts import read_manifest

    tr = read_manifest(directory).training
    chosen = responses if tr.get("max_tokens") is None else sd.select_by_budget(responses, tr["max_tokens"])
    every = tr.get("heldout_every", 10)
    seen = {r["question_id"] for j, r in enumerate(chosen) if j % every != every - 1}
    return [i for i in held if responses[i]["question_id"] not in seen]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--responses", required=True, help="self-distillation .jsonl (from specdec train eagle)")
    ap.add_argument(
        "--tensors", default=None, help="full-sequence hidden states (default: <responses>-full.safetensors)"
    )
    ap.add_argument("--heldout-every", type=int, default=10)
    ap.add_argument("--budgets", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--top-k", type=int, default=None, help="override the manifest's drafting top_k")
    ap.add_argument("--max-depth", type=int, default=None, help="override the manifest's drafting max_depth")
    ap.add_argument("--min-prob", type=float, default=None)
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N held-out records")
    ap.add_argument("--medusa", default=None, help="also replay this Medusa artifact on the same records")
    ap.add_argument("--online", type=int, default=0, help="also time N prompts through SpeculativeDecoder")
    ap.add_argument("--online-budget", default="16", help="an int, or 'auto' (cost model up to --online-max-budget)")
    ap.add_argument("--online-max-budget", type=int, default=16)
    ap.add_argument("--online-tokens", type=int, default=64)
    ap.add_argument(
        "--record",
        action="store_true",
        help="append the results to the artifact's manifest (and Medusa's to its own with --medusa)",
    )
    args = ap.parse_args(argv)

    from safetensors.torch import load_file

    from specdec.models import load_default

    model, _ = load_default()
    opts = {
        k: v
        for k, v in (("top_k", args.top_k), ("max_depth", args.max_depth), ("min_prob", args.min_prob))
        if v is not None
    }
    prop = EagleProposer.load(args.artifact, model, **opts)
    responses = sd.load_records(args.responses)
    t = load_file(args.tensors or args.responses[: -len(".jsonl")] + "-full.safetensors")
    data = FullSequences(responses, t["hidden"], t["tokens"], t["offsets"])
    held = data.heldout(args.heldout_every)[: args.limit]
    drafting = {
        "top_k": prop.top_k,
        "max_depth": prop.max_depth,
        "min_prob": round(float(torch.tensor(prop.min_logp).exp()), 6),
    }
    print(f"EAGLE {args.artifact} {drafting}, {len(held)} held-out records", file=sys.stderr)
    results = {}
    for budget in args.budgets:
        results[budget] = measure(prop, data, held, budget)
        r = results[budget]
        print(
            f"eagle  budget {budget:3d}: {r['overall']:.3f} tokens/step over {r['steps']} steps, "
            f"propose {r['propose_ms']} ms/step {r['by_category']}"
        )
    facts = {
        "kind": "greedy replay, held-out records",
        "records": len(held),
        "drafting": drafting,
        "tokens_per_step_by_budget": results,
    }
    if args.medusa:
        from specdec.proposers.heads import MedusaProposer

        med = MedusaProposer.load(args.medusa, model)
        unseen = medusa_unseen(responses, held, args.medusa)
        facts["medusa_same_run"] = {"artifact": args.medusa, "records": len(unseen), "tokens_per_step_by_budget": {}}
        for budget in args.budgets:
            r = measure(med, data, unseen, budget)
            facts["medusa_same_run"]["tokens_per_step_by_budget"][budget] = r
            print(
                f"medusa budget {budget:3d}: {r['overall']:.3f} tokens/step over {r['steps']} steps "
                f"({len(unseen)} records it never trained on), propose {r['propose_ms']} ms/step"
            )
    if args.online:
        budget = args.online_budget if args.online_budget == "auto" else int(args.online_budget)
        facts["online"] = online_speedup(
            model,
            prop,
            [responses[i]["prompt_ids"] for i in held[: args.online]],
            budget,
            args.online_tokens,
            name="eagle",
            max_budget=args.online_max_budget,
        )
        print(json.dumps(facts["online"], indent=1))
    if args.record:
        command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
        best = max(results, key=lambda b: results[b]["overall"])
        record_measurement(args.artifact, tokens_per_step=results[best]["overall"], budget=best, **facts,
                           command=command)
        if args.medusa:  # the Medusa artifact keeps its own replay of the same records
            med_res = facts["medusa_same_run"]["tokens_per_step_by_budget"]
            mb = max(med_res, key=lambda b: med_res[b]["overall"])
            record_measurement(
                args.medusa,
                tokens_per_step=med_res[mb]["overall"],
                budget=mb,
                kind="greedy replay, held-out records it never trained on",
                records=facts["medusa_same_run"]["records"],
                tokens_per_step_by_budget=med_res,
                eagle_same_run={"artifact": args.artifact, "tokens_per_step_by_budget": results},
                command=command,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
