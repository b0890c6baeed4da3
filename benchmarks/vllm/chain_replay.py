"""Chain drafts as vLLM verifies them, replayed on the target's own greedy answers: specdec's suffix
drafter (match-length calibration on and off) beside ArcticInference's suffix cache (vLLM's
``method="suffix"``), in one run on the same answers.

Each step every method drafts a chain of at most ``--k`` tokens from prompt + committed tokens:

* ``specdec calibrate=<mode>``: ``SuffixProposer`` trees (``--tree-budget`` nodes) cut to their best
  root-to-leaf path by ``best_path``, exactly what ``SuffixRowBatch`` hands vLLM; with ``floor=x``
  (``--floors``) the chain also stops before its first token whose path probability is below x,
  the bar a cost gate sets (``CostGate.floor``: drafted tokens that do not pay for their verify time);
* ``arctic``: ``SuffixDecodingCache.speculate`` with vLLM 0.32's defaults (depth 24, spec factor
  1.0, min token prob 0.1, the last 24 tokens as the pattern), when ``arctic_inference`` imports
  (``scripts/build_arctic_suffix.sh`` builds it into ``.arctic/site``).

Greedy verification accepts the longest prefix of the chain that equals the answer; the accepted
tokens and the target's own next token are committed (:class:`specdec.measure.greedy_replay.AnswerReplay`).
Every method keeps a global cache of the answers replayed before it (file order), as a serving
engine does. Reported per method: tokens per
step, drafted tokens per step, accepted per drafted token, and a model-time speedup estimate
``tokens / sum(cost(drafted) / cost(0))`` under the verify-cost curve ``--cost`` (a yardstick
shared by all methods, not a vLLM measurement).

    python -m benchmarks.vllm.chain_replay --data benchmarks/data/greedy_smollm2.jsonl [--k 4] [--split odd]
"""

from __future__ import annotations

import argparse
import collections

from benchmarks.common.answers import DEFAULT_DATA, VOCAB, read_rows
from benchmarks.common.cost_curve import parse_curve
from benchmarks.vllm.bench_propose import arctic_cache
from specdec import DraftTree
from specdec.estimate.verify_cost import VerifyCostModel
from specdec.integrations.rows import best_chain
from specdec.measure.greedy_replay import AnswerReplay
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixCalibration
from specdec.proposers.suffix_automaton import MatchCalibration

DEFAULT_COST = "0:23.2,1:25.4,2:25.4,4:27.0,8:29.5,16:42.4,32:52.3"  # docs/engine.md, SmolLM2 on this CPU (ms)


class SpecdecChains:
    def __init__(self, mode: str, k: int, tree_budget: int, floor: float = 0.0):
        self.prop = SuffixProposer(VOCAB, calibration=SuffixCalibration(mode=mode))
        self.k, self.budget, self.floor = k, tree_budget, floor

    def begin(self, rid, prompt):
        self.prop.begin(rid, prompt)

    def draft(self, rid, context):
        (scored,) = self.prop.propose_scored([rid], self.budget)
        return best_chain(scored.tree, scored.node_probs, self.k, self.floor)

    def commit(self, rid, ids):
        self.prop.commit(rid, ids)

    def end(self, rid):
        self.prop.end(rid)


class ArcticChains:
    def __init__(self, cache_cls, k: int):
        self.cache = cache_cls(max_tree_depth=24, max_cached_requests=10000)
        self.k = k

    def begin(self, rid, prompt):
        self.cache.start_request(rid, prompt)

    def draft(self, rid, context):
        d = self.cache.speculate(rid, context[-24:], max_spec_tokens=self.k, max_spec_factor=1.0, min_token_prob=0.1)
        return list(d.token_ids)

    def commit(self, rid, ids):
        self.cache.add_active_response(rid, ids)

    def end(self, rid):
        self.cache.stop_request(rid)


def replay(rows: list[dict], method, cost: VerifyCostModel) -> dict:
    totals = collections.defaultdict(collections.Counter)
    for i, row in enumerate(rows):
        rid, t = f"q{i}", collections.Counter()
        context, answer = list(row["prompt_ids"]), row["output_ids"]
        method.begin(rid, context)

        def commit(pos, ids, rid=rid, context=context):
            method.commit(rid, ids)
            context.extend(ids)

        steps = AnswerReplay(answer, commit)
        while not steps.done:
            chain = method.draft(rid, context)
            a = steps.step(DraftTree.chain(chain)).accepted
            t.update(steps=1, tokens=a + 1, accepted=a, drafted=len(chain), cost=cost.cost(len(chain)) / cost.cost(0))
        method.end(rid)
        totals[None].update(t)
        totals[row.get("category", "-")].update(t)
    return totals


LENGTHS = ("1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65+")
SHORTEST = (1, 2, 3, 5, 9, 17, 33, 65)  # the shortest matched length of each bucket


def print_cells(prop: SuffixProposer) -> None:
    """The learnt table's single-continuation cells (one continuation seen once) by matched length:
    nodes tested and the share accepted (accepted / predicted: their raw estimate is 1)."""
    c = prop.match_calibration
    print("\nsingle continuation seen once, by matched context length (tested nodes: accepted share)")
    print("| cache | " + " | ".join(LENGTHS) + " |")
    print("|---|" + "---:|" * len(LENGTHS))
    for name in ("request", "global", "pooled"):
        cells = [MatchCalibration.cell(name, length, 1, 1) for length in SHORTEST]
        if c.tested[cells].sum() == 0:
            continue
        print(f"| {name} | " + " | ".join(
            f"{c.tested[k]}: {c.accepted[k] / c.predicted[k]:.2f}" if c.tested[k] else "-" for k in cells) + " |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--tree-budget", type=int, default=16, help="nodes of the tree specdec cuts its chain from")
    ap.add_argument("--cost", default=DEFAULT_COST, help='verify cost curve "nodes:ms,..."')
    ap.add_argument("--floors", default="0", help="chain floors for specdec, comma-separated (0: none)")
    ap.add_argument("--split", choices=("all", "odd", "even"), default="all",
                    help="answers by position in the file: odd/even halves for held-out checks")
    args = ap.parse_args(argv)
    if args.k < 1 or args.tree_budget < args.k:
        ap.error("need --k >= 1 and --tree-budget >= --k")
    rows = read_rows(args.data)
    if args.split != "all":
        rows = rows[args.split == "odd" :: 2]
    curve = parse_curve(args.cost)
    cost = VerifyCostModel(sizes=[n for n, _ in curve], seconds=[s for _, s in curve])
    floors = [float(x) for x in args.floors.split(",")]
    if any(not 0.0 <= f <= 1.0 for f in floors):
        ap.error("--floors must lie in [0, 1]")
    methods = {}
    for f in floors:
        for m in ("online", "off"):
            name = f"specdec calibrate={m}" + (f", floor={f:g}" if f else "")
            methods[name] = SpecdecChains(m, args.k, args.tree_budget, f)
    cache_cls, why = arctic_cache()
    if cache_cls is not None:
        methods["arctic"] = ArcticChains(cache_cls, args.k)
    print(f"{args.data} ({args.split}): {len(rows)} answers, k={args.k}, tree budget {args.tree_budget}; "
          f"cost curve {args.cost}" + ("" if cache_cls else f"; arctic skipped: {why}"))
    print("| method | tokens/step | drafted/step | accepted/drafted | est. speedup (model time) | lowest category |")
    print("|---|---:|---:|---:|---:|---|")
    for name, method in methods.items():
        totals = replay(rows, method, cost)
        t = totals[None]
        worst = min((c for c in totals if c is not None), key=lambda c: totals[c]["tokens"] / totals[c]["cost"])
        print(f"| {name} | {t['tokens'] / t['steps']:.3f} | {t['drafted'] / t['steps']:.2f} | "
              f"{t['accepted'] / max(t['drafted'], 1):.3f} | {t['tokens'] / t['cost']:.3f}x | "
              f"{worst} {totals[worst]['tokens'] / totals[worst]['cost']:.3f}x |", flush=True)
    print_cells(methods["specdec calibrate=online"].prop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
