"""Mean tokens per step of a distilled drafter (``specdec train draft``) on held-out records, greedy replay.

Under greedy verification the target emits its recorded greedy continuation whatever the draft, so
the accepted length per step is the longest drafted path matching it; the real
:class:`~specdec.proposers.draft_model.DraftModelProposer` is driven through begin/propose/commit
(its KV-cache rollback included) by :func:`specdec.measure.greedy_replay.replay_sequence`. Tokens per step
counts the bonus token; a record's first response token comes from the prefill, as in the decoder.

    python -m benchmarks.replay.drafter_acceptance --artifact DIR \\
        --responses benchmarks/data/selfdistill-<fp>-384x256.jsonl --max-tokens 12000 --budget 4 --mode greedy
"""

from __future__ import annotations

import argparse
import collections

from specdec.measure.greedy_replay import replay_sequence
from specdec.models import load_default
from specdec.proposers.draft_model import DraftModelProposer
from specdec.training import data as sd
from specdec.training.distilled_drafter import load_drafter


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--responses", required=True)
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--heldout-every", type=int, default=10)
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--mode", default="greedy", choices=("greedy", "tree"))
    args = ap.parse_args(argv)
    target, tok = load_default()
    drafter, _ = load_drafter(args.artifact, target)
    prop = DraftModelProposer(drafter, target_tokenizer=tok, draft_tokenizer=tok, mode=args.mode)
    records = sd.load_records(args.responses)
    if args.max_tokens is not None:
        records = sd.select_by_budget(records, args.max_tokens)
    per_cat = collections.defaultdict(lambda: [0, 0])
    for i, rec in enumerate(records):
        if i % args.heldout_every != args.heldout_every - 1:
            continue
        prompt, resp = rec["prompt_ids"], rec["response_ids"]
        if not resp:
            continue
        r = replay_sequence(prop, prompt + resp, len(prompt), args.budget, req=i)
        per_cat[rec["category"]][0] += r.emitted
        per_cat[rec["category"]][1] += r.steps
    tot = [sum(v[0] for v in per_cat.values()), sum(v[1] for v in per_cat.values())]
    print(f"{args.mode} budget {args.budget}: {tot[0] / tot[1]:.3f} tokens/step over {tot[1]} steps "
          f"{ {c: round(v[0] / v[1], 3) for c, v in sorted(per_cat.items())} }")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
