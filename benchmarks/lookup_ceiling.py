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

    python benchmarks/lookup_ceiling.py [--data benchmarks/data/greedy_smollm2.jsonl] [--global]
"""

from __future__ import annotations

import argparse
import collections

from replay_suffix_acceptance import DEFAULT_DATA, read_rows


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


def measured_curve(prefix: int, repeats: int) -> list[tuple[int, float]]:
    """``[(nodes, seconds)]``: the fastest of ``repeats`` verify-cost calibrations of SmolLM2."""
    from specdec.engine.sizing import VerifyCostModel
    from specdec.models import load_default
    from specdec.verify.hf import HFTarget

    model, _ = load_default()
    target = HFTarget(model)
    curves = [VerifyCostModel.calibrate(target, prefix_len=prefix) for _ in range(repeats)]
    return [(n, min(c.seconds[i] for c in curves)) for i, n in enumerate(curves[0].sizes)]


def parse_curve(text: str) -> list[tuple[int, float]]:
    """``"0:25.1,1:27.2,..."`` (nodes:ms) -> ``[(nodes, seconds)]``, sorted; SystemExit naming the problem."""
    try:
        pairs = sorted((int(n), float(ms) / 1e3) for n, ms in (p.split(":") for p in text.split(",")))
    except ValueError as exc:
        raise SystemExit(f"--cost must look like '0:25.1,1:27.2' (nodes:ms pairs), got {text!r}") from exc
    if not pairs or pairs[0][0] != 0:
        raise SystemExit(f"--cost needs a point at 0 nodes, got {text!r}")
    return pairs


def relative_costs(cost, up_to: int) -> list[float]:
    """``c(k) / c(0)`` for ``k = 0 .. up_to`` from a :class:`~specdec.engine.verify_cost.VerifyCostModel`."""
    return [cost.cost(k) / cost.cost(0) for k in range(up_to + 1)]


def add_cost_args(ap: argparse.ArgumentParser) -> None:
    """``--cost`` / ``--prefix`` / ``--repeats``: a given verify-cost curve, or how to measure one."""
    ap.add_argument("--cost", default=None, help='verify cost curve "nodes:ms,..."; measured when omitted')
    ap.add_argument("--prefix", type=int, default=256, help="prefix length of the measured curve")
    ap.add_argument("--repeats", type=int, default=3, help="curves measured (fastest per size kept)")


def cost_model(args):
    """The :class:`~specdec.engine.verify_cost.VerifyCostModel` the options of :func:`add_cost_args` name
    (printed, so every table states the curve it was priced with)."""
    from specdec.engine.sizing import VerifyCostModel

    curve = parse_curve(args.cost) if args.cost else measured_curve(args.prefix, args.repeats)
    model = VerifyCostModel(sizes=[n for n, _ in curve], seconds=[s for _, s in curve])
    print("verify cost: " + model.describe())
    return model


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
    anchor = f", drafts follow a match of >= {args.min_match} tokens" if args.min_match else ", drafts copied from anywhere"
    print(f"\n{args.data} ({text}{anchor})")
    print("| category | tokens | mean K(t) | oracle accepted/step | speedup bound (measured c) | bound if verify were free |")
    print("|---|---:|---:|---:|---:|---:|")
    for key in sorted(table, key=lambda k: (k == "overall", k)):
        tokens, sum_k, cost, steps, free = table[key]
        print(f"| {key} | {tokens} | {sum_k / tokens:.2f} | {tokens / steps - 1:.2f} | "
              f"{tokens / cost:.2f}x | {tokens / free:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
