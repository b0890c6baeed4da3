"""Mean accepted tokens per step of trained Medusa heads on held-out prompts (greedy), by category.

Two measurements:

* **replay** (default, cheap): walks each held-out record's recorded greedy response step by step
  through the real :class:`~specdec.proposers.heads.MedusaProposer` (begin / propose / commit with
  the target's cached teacher-forced hidden states). Under greedy verification the target emits its
  greedy continuation whatever the draft, so the accepted length at each step is the longest tree
  path matching that continuation: this is exactly what the decoder would accept, without running
  the target again. Tokens per step counts the bonus token (Spec-Bench's "mean accepted tokens").
* ``--online N``: runs :class:`~specdec.SpeculativeDecoder` with the heads and plain
  decoding through the same loop on N held-out prompts, in the same process, and reports the
  wall-clock ratio (and checks both outputs are identical).

Usage (after ``specdec train heads --out DIR``)::

    python -m benchmarks.replay.heads_acceptance --artifact DIR \\
        --responses benchmarks/data/selfdistill-<fp>-384x256.jsonl \\
        --tensors benchmarks/data/selfdistill-<fp>-384x256-budget12000.safetensors --max-tokens 12000 \\
        --budgets 4 8 16 32 --record
"""

from __future__ import annotations

import argparse
import collections
import json
import shlex
import sys

from specdec.artifacts import load_artifact, record_measurement
from specdec.measure.greedy_replay import replay_sequence
from specdec.measure.speedup import online_speedup
from specdec.proposers.heads import MedusaProposer
from specdec.training import data as sd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--responses", required=True, help="self-distillation .jsonl (from specdec train heads)")
    ap.add_argument("--tensors", required=True, help="matching hidden-state .safetensors")
    ap.add_argument("--max-tokens", type=int, default=None, help="the --max-tokens the tensors were built with")
    ap.add_argument("--heldout-every", type=int, default=10)
    ap.add_argument("--budgets", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--online", type=int, default=0, help="also time N prompts through SpeculativeDecoder")
    ap.add_argument("--online-budget", type=int, default=8)
    ap.add_argument("--online-tokens", type=int, default=64)
    ap.add_argument("--record", action="store_true", help="append the results to the artifact's manifest")
    args = ap.parse_args(argv)

    tensors, manifest = load_artifact(args.artifact)
    from specdec.models import load_default

    model, _ = load_default()
    prop = MedusaProposer.load(args.artifact, model)
    responses = sd.load_records(args.responses)
    records = responses if args.max_tokens is None else sd.select_by_budget(responses, args.max_tokens)
    t = sd.load_tensors(args.tensors)
    held = [i for i in range(len(records)) if i % args.heldout_every == args.heldout_every - 1]
    results = {}
    for budget in args.budgets:
        per_cat = collections.defaultdict(lambda: [0, 0])
        for i in held:
            sel = t["record"] == i
            # rows start at the last prompt position: a one-token "prompt" (Medusa reads only hidden states)
            r = replay_sequence(prop, t["tokens"][sel].tolist(), 1, budget, hidden=t["hidden"][sel].float())
            per_cat[records[i]["category"]][0] += r.emitted
            per_cat[records[i]["category"]][1] += r.steps
        tot_e = sum(v[0] for v in per_cat.values())
        tot_s = sum(v[1] for v in per_cat.values())
        results[budget] = {"overall": round(tot_e / max(tot_s, 1), 3),
                           "by_category": {c: round(v[0] / max(v[1], 1), 3) for c, v in sorted(per_cat.items())},
                           "steps": tot_s, "tokens": tot_e}
        print(f"budget {budget:3d}: {results[budget]['overall']:.3f} tokens/step over {tot_s} steps "
              f"{results[budget]['by_category']}")
    facts = {"kind": "greedy replay, held-out records", "records": len(held), "tokens_per_step_by_budget": results}
    if args.online:
        facts["online"] = online_speedup(model, prop, [records[i]["prompt_ids"] for i in held[: args.online]],
                                  args.online_budget, args.online_tokens, name="medusa")
    if args.record:
        best = max(results, key=lambda b: results[b]["overall"])
        record_measurement(args.artifact, tokens_per_step=results[best]["overall"], budget=best, **facts,
                           command="python " + " ".join(shlex.quote(a) for a in sys.argv))
    print(json.dumps(facts.get("online", {}), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
