"""How long the suffix automaton's count walks are, and what moving the counts to the link-cut forest costs.

Why: the automaton keeps its counts in a plain array, adding one along each new state's
suffix-link path, and moves them to a link-cut forest once a path passes ``walk_limit`` states
(``csrc/suffix/suffix_automaton.h``). That pays only if the paths of real text are short, so this
script measures them, per appended token, on

* the dev prompts (both turns of each, SmolLM2-tokenised, one automaton per prompt);
* the same prompts run together as one 20k-token text;
* the synthetic traffic of ``benchmarks.kernels.suffix`` (two 8k-token documents),

and then times the one-time move: a 1M-token global cache of that traffic, then one document with a
run of 100 equal tokens (a path longer than 64 states), then a second such document (already moved).

    python -m benchmarks.kernels.suffix_link_paths [--prompts ../shared/data/prompts_dev.jsonl]
        [--global-tokens 1000000]
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np

from benchmarks.common.paths import DEV_PROMPTS
from benchmarks.kernels.suffix import VOCAB, Traffic
from specdec.models import load_default
from specdec.prompts import read_prompt_records
from specdec.proposers.suffix_automaton import SuffixAutomaton


def walk_lengths(docs, vocab: int) -> collections.Counter:
    """States on each appended token's suffix-link path (the new state to the root, both counted)."""
    hist = collections.Counter()
    for doc in docs:
        sam = SuffixAutomaton(vocab)
        for t in doc:
            sam.extend(np.array([t], dtype=np.int32))
            _, s = sam.repeat_match()  # the new state's suffix link
            walked = 1
            while s >= 0:
                walked += 1
                s = sam.state_link(s)
            hist[walked] += 1
    return hist


def summary(name: str, hist: collections.Counter) -> str:
    total = sum(hist.values())
    cum, quant = 0, {}
    for length, count in sorted(hist.items()):
        cum += count
        for q in (0.5, 0.99, 0.999):
            if q not in quant and cum >= q * total:
                quant[q] = length
    mean = sum(k * v for k, v in hist.items()) / total
    return (f"| {name} | {total} | {mean:.2f} | {quant[0.5]} | {quant[0.99]} | {quant[0.999]} | {max(hist)} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default=str(DEV_PROMPTS))
    ap.add_argument("--global-tokens", type=int, default=1_000_000)
    args = ap.parse_args(argv)
    if args.global_tokens < 1:
        ap.error("--global-tokens must be >= 1")
    try:  # a missing or malformed file fails before the model loads
        records = read_prompt_records(args.prompts)
    except ValueError as exc:
        ap.error(f"--prompts: {exc}")
    _, tok = load_default()
    vocab = len(tok)
    docs = [tok(" ".join(r["turns"]))["input_ids"] for r in records]
    traffic = Traffic(1)
    print("| text | tokens | mean states walked | p50 | p99 | p99.9 | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(summary("dev prompts, one automaton each", walk_lengths(docs, vocab)))
    print(summary("dev prompts as one text (first 20k tokens)", walk_lengths([sum(docs, [])[:20_000]], vocab)))
    print(summary("synthetic traffic, 2 x 8k", walk_lengths([traffic.document(8192) for _ in range(2)], VOCAB)))

    traffic, sam, n = Traffic(0), SuffixAutomaton(VOCAB), 0
    while n < args.global_tokens:
        doc = traffic.document(int(traffic.rng.integers(100, 1000)))
        sam.add_document(doc)
        n += doc.size
    print(f"global cache: {len(sam)} tokens, {sam.num_states} states, counts linked: {sam.counts_linked}, "
          f"{sam.memory_bytes() / len(sam):.1f} B/token")
    run = np.full(100, 7, dtype=np.int32)
    for label in ("first run document (moves the counts)", "second run document"):
        t0 = time.perf_counter()
        sam.add_document(run)
        print(f"{label}: {(time.perf_counter() - t0) * 1e3:.2f} ms; counts linked: {sam.counts_linked}, "
              f"{sam.memory_bytes() / len(sam):.1f} B/token")


if __name__ == "__main__":
    main()
