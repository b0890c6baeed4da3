"""The best speedup ANY lookup proposer could reach on the target's own greedy outputs.

A lookup proposer (the suffix proposer, HF prompt lookup, llama.cpp's n-gram drafting) copies its
draft from text it has seen: the prompt and the tokens committed so far (``--global`` adds the
earlier records' answers, as a warm global cache would). Whatever tree it drafts, an accepted
path is then a substring of that text, so at answer position ``t`` at most ``K(t)`` tokens can be
accepted, ``K(t)`` being the length of the longest prefix of the true continuation that occurs in
the text. An oracle drafting exactly those tokens verifies ``k <= K(t)`` nodes, pays the measured
verify cost ``c(k)`` and moves ``k + 1`` tokens; a real proposer pays at least as much for at
most as many tokens (any wasted node only adds cost, ``c`` never falls with more nodes). The
oracle's best schedule is a shortest path over answer positions::

    T(t) = min over 0 <= k <= K(t) of  c(k) / c(0) + T(t + k + 1),    T(end) = 0

and ``len(answer) / T(0)`` bounds the speedup over plain decoding (one ``c(0)`` step per token)
from above: no drafting, acceptance-estimation, compaction or Python overhead is charged.

``c`` is measured in the same run on the embedded SmolLM2 (``VerifyCostModel.calibrate``, best of
``--repeats`` curves over a ``--prefix``-token prefix) unless ``--cost "0:25.1,1:27.2,..."`` (ms)
gives one. Reported per category: mean ``K`` over positions, accepted tokens per step of the
oracle's schedule, and the speedup bound; also the bound if verifying drafts were free (``c``
flat), which depends on the data alone.

    python -m benchmarks.replay.lookup_ceiling [--data benchmarks/data/greedy_smollm2.jsonl] [--global]
"""

from __future__ import annotations

import argparse
import collections

from benchmarks.common.answers import DEFAULT_DATA, read_rows
from benchmarks.common.cost_curve import add_cost_args, cost_model, relative_costs


def _text(ids: list[int]) -> str:
    """Token ids as a string of code points, so ``str.find`` does the substring search."""
    return "".join(map(chr, ids))


def copy_lengths(context: list[int], answer: list[int], seen: str = "", max_len: int = 64,
                 min_match: int = 0) -> list[int]:
    """``K(t)`` for each answer position ``t``: the longest prefix of ``answer[t:]`` (at most
    ``max_len`` and never the answer's last token, which is always the target's own) found in
    ``context + answer[:t]`` or in ``seen`` (other documents, already joined by :func:`_text`)
    right after an occurrence of the last ``min_match`` tokens committed (0: anywhere)."""
    hay = _text(context)
    out = []
    for t in range(len(answer)):
        if t:
            hay += chr(answer[t - 1])
        anchor = hay[len(hay) - min_match :] if min_match else ""
        limit = min(max_len, len(answer) - t - 1) if len(anchor) == min_match else 0
        k = 0
        while k < limit:
            probe = anchor + _text(answer[t : t + k + 1])
            if probe not in hay and probe not in seen:
                break
            k += 1
        out.append(k)
    return out


def best_schedule(k_max: list[int], rel_cost: list[float]) -> tuple[float, int]:
    """``(total relative cost, steps)`` of the cheapest schedule over ``len(k_max)`` positions.

    ``rel_cost[k]`` is ``c(k) / c(0)`` for ``k`` drafted nodes (``len(rel_cost) > max(k_max)``).
    """
    n = len(k_max)
    cost = [0.0] * (n + 1)
    steps = [0] * (n + 1)
    for t in range(n - 1, -1, -1):
        best, best_steps = float("inf"), 0
        for k in range(min(k_max[t], n - t - 1) + 1):
            c = rel_cost[k] + cost[t + k + 1]
            if c < best:
                best, best_steps = c, 1 + steps[t + k + 1]
        cost[t], steps[t] = best, best_steps
    return cost[0], steps[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA),
                    help="JSONL rows with prompt_ids, category and output_ids or response_ids")
    ap.add_argument("--global", dest="use_global", action="store_true",
                    help="earlier records' answers count as seen text (a global cache)")
    ap.add_argument("--min-match", type=int, default=0,
                    help="drafts must follow an occurrence of the last N committed tokens (0: anywhere)")
    ap.add_argument("--max-draft", type=int, default=64, help="most nodes one verify may hold")
    add_cost_args(ap)
    args = ap.parse_args(argv)
    if args.min_match < 0 or args.max_draft < 1:
        raise SystemExit(f"--min-match must be >= 0 and --max-draft >= 1, got {args.min_match} / {args.max_draft}")

    rel = relative_costs(cost_model(args), args.max_draft)
    flat = [1.0] * (args.max_draft + 1)

    table = collections.defaultdict(lambda: [0, 0, 0.0, 0, 0.0])  # tokens, sum K, cost, steps, free cost
    seen = ""
    for row in read_rows(args.data):
        answer = row["output_ids"]
        ks = copy_lengths(row["prompt_ids"], answer, seen if args.use_global else "", args.max_draft,
                          args.min_match)
        cost, steps = best_schedule(ks, rel)
        free, _ = best_schedule(ks, flat)
        for key in (row["category"], "overall"):
            cell = table[key]
            cell[0] += len(answer)
            cell[1] += sum(ks)
            cell[2] += cost
            cell[3] += steps
            cell[4] += free
        if args.use_global:
            seen += _text(answer) + "\uffff"  # a separator no token id maps to (ids < 0xffff)

    text = "prompt + answer so far" + (" + earlier answers" if args.use_global else "")
    anchor = (
        f", drafts follow a match of >= {args.min_match} tokens" if args.min_match else ", drafts copied from anywhere"
    )
    print(f"\n{args.data} ({text}{anchor})")
    print(
        "| category | tokens | mean K(t) | oracle accepted/step | speedup bound (measured c) | bound if verify were "
        "free |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for key in sorted(table, key=lambda k: (k == "overall", k)):
        tokens, sum_k, cost, steps, free = table[key]
        print(
            f"| {key} | {tokens} | {sum_k / tokens:.2f} | {tokens / steps - 1:.2f} | "
            f"{tokens / cost:.2f}x | {tokens / free:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
