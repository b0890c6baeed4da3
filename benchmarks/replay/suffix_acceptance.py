"""Acceptance of the suffix proposer on the target's own greedy outputs, beside HF's prompt lookup.

Replays ``benchmarks/data/greedy_smollm2.jsonl`` (made by ``benchmarks.datagen.greedy_outputs``): at each step
the drafter proposes from prompt + committed tokens, the greedy target accepts the longest tree
path that equals its own next tokens, and the accepted tokens plus the target's one token are
committed (:class:`specdec.measure.greedy_replay.AnswerReplay`). Under greedy verification this is
exactly what the decode loop would accept, without running the model. Reported per category:
mean accepted draft tokens per step and the share of steps that drafted anything, for

* ``suffix-req``: SuffixProposer with the request cache only,
* ``suffix+global``: plus the global cache, filled with earlier replayed responses (file order),
  and first warmed with the responses of ``--warm`` (``SuffixProposer.warm``) when given,
* ``hf-lookup``: HF ``PromptLookupCandidateGenerator`` (10 tokens, n-gram <= 2) as a chain.

Last, the estimates of ``suffix+global`` against what was accepted, per drafting cache
(``ScoredDraft.source``) and per tree depth: the calibration the decoder's cost model depends on.

    python -m benchmarks.replay.suffix_acceptance [--data ...] [--budget 16] [--warm responses.jsonl]

``--data`` / ``--warm`` rows hold ``prompt_ids`` and ``output_ids`` or ``response_ids`` (the
self-distillation files of ``specdec train`` work as they are).
"""

from __future__ import annotations

import argparse
import collections

import torch

from benchmarks.common.answers import DEFAULT_DATA, VOCAB, read_rows
from specdec import DraftTree
from specdec.measure.greedy_replay import AnswerReplay
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixDrafting, SuffixGlobalCache


def replay_suffix(prop: SuffixProposer, rid, prompt: list[int], output: list[int], budget: int,
                  calibration: dict | None = None, depths: dict | None = None) -> tuple[int, int, int]:
    """(steps, accepted draft tokens, steps that drafted) for one request. ``calibration``, when
    given, accumulates ``{source: [drafting steps, predicted accepted, accepted]}`` per cache, and
    ``depths`` ``{tree depth: [nodes, summed estimates, accepted nodes]}``."""
    prop.begin(rid, prompt)
    answer = AnswerReplay(output, lambda pos, ids: prop.commit(rid, ids))
    steps = accepted = drafted = 0
    while not answer.done:
        (scored,) = prop.propose_scored([rid], budget)
        tree = scored.tree
        path = answer.step(tree).path
        a = len(path)
        if depths is not None:
            for node, (d, p) in enumerate(zip(tree.depth_list, scored.node_probs.tolist())):
                cell = depths.setdefault(d, [0, 0.0, 0])
                cell[0], cell[1], cell[2] = cell[0] + 1, cell[1] + p, cell[2] + (node in path)
        steps += 1
        accepted += a
        drafted += tree.num_nodes > 0
        if calibration is not None and tree.num_nodes:
            cell = calibration.setdefault(scored.source, [0, 0.0, 0])
            cell[0], cell[1], cell[2] = cell[0] + 1, cell[1] + scored.expected_accepted, cell[2] + a
    prop.end(rid)
    return steps, accepted, drafted


def replay_hf(prompt: list[int], output: list[int]) -> tuple[int, int, int]:
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    seq = torch.tensor([prompt + output], dtype=torch.long)
    hf = PromptLookupCandidateGenerator(num_output_tokens=10, max_matching_ngram_size=2,
                                        max_length=seq.shape[1] + 16, vocab_size=VOCAB)
    answer = AnswerReplay(output, lambda pos, ids: None)  # HF drafts from the sequence so far: no state
    steps = accepted = drafted = 0
    while not answer.done:
        cand, _ = hf.get_candidates(seq[:, : len(prompt) + answer.pos])
        draft = cand[0, len(prompt) + answer.pos :]
        steps += 1
        accepted += answer.step(DraftTree.chain(draft)).accepted
        drafted += draft.numel() > 0
    return steps, accepted, drafted


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--min-match-len", type=int, default=None, help="SuffixProposer default when omitted")
    ap.add_argument("--min-prob", type=float, default=None)
    ap.add_argument("--depth-factor", type=float, default=None)
    ap.add_argument("--warm", default=None, help="JSONL of earlier responses to warm the global cache with")
    ap.add_argument("--combine", default=None, choices=("longest", "pool"))
    ap.add_argument("--count-prior", type=float, default=None)
    ap.add_argument("--global-count-prior", type=float, default=None)
    args = ap.parse_args(argv)
    rules = {k: v for k, v in [("min_match_len", args.min_match_len), ("min_prob", args.min_prob),
                              ("depth_factor", args.depth_factor), ("combine", args.combine),
                              ("count_prior", args.count_prior), ("global_count_prior", args.global_count_prior)]
            if v is not None}
    rows = read_rows(args.data)
    drafting = SuffixDrafting(**rules)
    req_only = SuffixProposer(VOCAB, drafting=drafting, cache=SuffixGlobalCache(use_global=False))
    with_global = SuffixProposer(VOCAB, drafting=drafting)
    warmed = with_global.warm(r["output_ids"] for r in read_rows(args.warm)) if args.warm else 0
    table = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0, 0]))
    calibration: dict = {}
    depths: dict = {}
    for i, row in enumerate(rows):
        results = {
            "suffix-req": replay_suffix(req_only, i, row["prompt_ids"], row["output_ids"], args.budget),
            "suffix+global": replay_suffix(with_global, i, row["prompt_ids"], row["output_ids"], args.budget,
                                           calibration, depths),
            "hf-lookup": replay_hf(row["prompt_ids"], row["output_ids"]),
        }
        for name, (steps, acc, drafted) in results.items():
            for key in (row["category"], "ALL"):
                cell = table[key][name]
                cell[0] += steps
                cell[1] += acc
                cell[2] += drafted
    names = ["suffix-req", "suffix+global", "hf-lookup"]
    print(f"warm global cache: {warmed} tokens from {args.warm}" if args.warm else "cold global cache")
    print(
        f"{len(rows)} requests, budget {args.budget}, options {rules or 'defaults'}; cells: mean accepted draft "
        "tokens per step / share of steps drafting"
    )
    print(f"{'category':>15} | " + " | ".join(f"{n:>18}" for n in names))
    for cat in sorted(table, key=lambda c: (c == "ALL", c)):
        cells = [table[cat][n] for n in names]
        print(f"{cat:>15} | " + " | ".join(f"{c[1] / c[0]:>9.3f} / {c[2] / c[0]:>5.2f}" for c in cells))
    print(
        "suffix+global calibration (steps that drafted): cache, steps, predicted accepted per step, accepted per step"
    )
    for source, (n, predicted, acc) in sorted(calibration.items()):
        print(f"{source:>15} | {n:>6} | {predicted / n:>7.3f} | {acc / n:>7.3f}")
    print("suffix+global drafted nodes by tree depth: depth, nodes, mean estimate, share accepted")
    for d, (n, predicted, acc) in sorted(depths.items()):
        print(f"{d:>15} | {n:>6} | {predicted / n:>7.3f} | {acc / n:>7.3f}")


if __name__ == "__main__":
    main()
