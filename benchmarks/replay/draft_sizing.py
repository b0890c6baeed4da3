"""The decoder's draft-sizing policy replayed on the target's own greedy answers, variant by variant.

Each step the suffix proposer drafts from prompt + committed tokens (``propose_scored``, budget
``--budget``), the decoder's own policy object (:class:`~specdec.control.sizer.DraftSizer`: the
calibration of the drafting cache, then the verify-cost curve's best size) keeps part of the tree,
the greedy target accepts the longest kept path that matches its recorded answer
(:class:`specdec.measure.greedy_replay.AnswerReplay`), and the sizer
learns from it, as in :class:`~specdec.SpeculativeDecoder` (one ``tick`` per step). Under greedy
verification this is what the decode loop accepts, without
running the model; the step costs ``c(kept nodes) / c(0)``, from a verify-cost curve measured in
the same run on the embedded SmolLM2 or given with ``--cost``. Model time only: proposer,
acceptance and compaction overheads and the prefill are not charged.

Variants, all in the same run on the same answers:

* ``per-request + per-depth`` -- the library's calibration: each request's own per-depth
  evidence shrunk toward its source's decoder-wide one (``RequestCalibration``);
* ``per-depth`` -- the decoder-wide calibration alone (a ratio per tree depth, evidence decaying
  by 0.998 per step);
* ``per-depth, no decay`` -- the same without forgetting;
* ``one scale`` / ``one scale, no decay`` -- one ratio pooled over all depths (the decoder's
  policy before 2026-11-30 is ``one scale, no decay``).

``--calibrate online,off`` runs every variant once per ``SuffixCalibration(mode=...)``: the
proposer's own match-length calibration of each node (``online``, the default) against raw
frequencies (``off``, the proposer before 2026-12-01). ``--variants "per-depth;one scale"`` picks variants by name.
The global cache fills from the answers replayed before (file order), as in serving.
``--ask adaptive,fixed`` compares the sizer's adaptive ask (``DraftSizer.ask_for``) with asking for
``--budget`` nodes every step.

    python -m benchmarks.replay.draft_sizing [--data benchmarks/data/greedy_smollm2.jsonl] [--cost "0:22,1:24.3,..."]
"""

from __future__ import annotations

import argparse
import collections
from dataclasses import dataclass

from benchmarks.common.answers import DEFAULT_DATA, VOCAB, read_rows
from benchmarks.common.cost_curve import add_cost_args, cost_model
from specdec.control.sizer import DraftSizer, ScoreCalibration
from specdec.estimate.verify_cost import VerifyCostModel
from specdec.measure.greedy_replay import AnswerReplay
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixCalibration


@dataclass
class OneScale(ScoreCalibration):
    """One ratio for every depth: all accepted tokens over all estimated mass."""

    def ratios(self, max_depth: int) -> list[float]:
        r = (sum(self.accepted) + self.prior_accepted) / (sum(self.predicted) + self.prior_predicted)
        return [min(1.0, r)] * max_depth


# name -> (shared calibration per source, whether each request has its own on top)
VARIANTS = {
    "per-request + per-depth": (ScoreCalibration, True),
    "per-depth": (ScoreCalibration, False),
    "per-depth, no decay": (lambda: ScoreCalibration(decay=1.0), False),
    "one scale": (OneScale, False),
    "one scale, no decay": (lambda: OneScale(decay=1.0), False),
}


def replay(rows: list[dict], variant, cost: VerifyCostModel, budget: int, calibrate: str = "online",
           adaptive_ask: bool = True) -> dict:
    """Totals over ``rows`` for one policy (a :data:`VARIANTS` value), overall (``None``) and per
    category: tokens, steps, accepted, drafted, relative cost."""
    make_calibration, per_request = variant
    prop = SuffixProposer(VOCAB, calibration=SuffixCalibration(mode=calibrate))
    sizer = DraftSizer("auto", budget, calibration=make_calibration, per_request=per_request,
                       adaptive_ask=adaptive_ask)
    sizer.set_cost(cost)
    totals = collections.defaultdict(collections.Counter)
    for i, row in enumerate(rows):
        t = collections.Counter()
        prop.begin(i, row["prompt_ids"])
        answer = AnswerReplay(row["output_ids"], lambda pos, ids, i=i: prop.commit(i, ids))
        while not answer.done:
            (scored,) = prop.propose_scored([i], sizer.ask_for(i))
            tree, ticket = sizer.size(i, scored.tree, scored.node_probs.tolist(), scored.source)
            path = answer.step(tree).path
            a = len(path)
            sizer.learn(ticket, path)
            sizer.tick()
            t["steps"] += 1
            t["tokens"] += a + 1
            t["accepted"] += a
            t["drafted"] += tree.num_nodes
            t["cost"] += cost.cost(tree.num_nodes) / cost.cost(0)
        prop.end(i)
        sizer.end(i)
        totals[None].update(t)
        totals[row.get("category", "-")].update(t)
    return totals


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--data", default=str(DEFAULT_DATA), help="JSONL rows with prompt_ids and output_ids or response_ids"
    )
    ap.add_argument("--budget", type=int, default=16, help="nodes the proposer may draft per step")
    ap.add_argument("--calibrate", default="online,off", help="SuffixProposer calibrate modes, comma-separated")
    ap.add_argument("--variants", default=";".join(VARIANTS), help="sizer variants by name, separated by ;")
    ap.add_argument("--ask", default="adaptive", help="adaptive and/or fixed, comma-separated (DraftSizer.ask_for)")
    add_cost_args(ap)
    args = ap.parse_args(argv)
    modes = args.calibrate.split(",")
    names = args.variants.split(";")
    for name in names:
        if name not in VARIANTS:
            ap.error(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
    for mode in modes:
        if mode not in ("online", "frozen", "off"):
            ap.error(f"--calibrate modes are online, frozen and off, got {mode!r}")

    asks = args.ask.split(",")
    if any(a not in ("adaptive", "fixed") for a in asks):
        ap.error(f"--ask takes adaptive and/or fixed, got {args.ask!r}")

    cost = cost_model(args)
    rows = read_rows(args.data)
    print(f"\n{args.data}: {len(rows)} answers, budget {args.budget}")
    print("| calibration | proposer calibrate | ask | tokens/step | accepted/step | drafted/step | accepted/drafted | "
          "est. speedup (model time) | lowest category |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for name in names:
        for mode, ask in [(m, a) for m in modes for a in asks]:
            totals = replay(rows, VARIANTS[name], cost, args.budget, mode, ask == "adaptive")
            t = totals[None]
            worst = min((k for k in totals if k is not None), key=lambda k: totals[k]["tokens"] / totals[k]["cost"])
            print(
                f"| {name} | {mode} | {ask} | {t['tokens'] / t['steps']:.3f} | {t['accepted'] / t['steps']:.3f} | "
                f"{t['drafted'] / t['steps']:.2f} | {t['accepted'] / max(t['drafted'], 1):.3f} | "
                f"{t['tokens'] / t['cost']:.3f}x | {worst} {totals[worst]['tokens'] / totals[worst]['cost']:.3f}x |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
