"""Compare proposers on a prompt file: tokens/s, speedup over plain decoding, accepted tokens/step.

    python examples/compare_proposers.py --tiny                      # tiny random model, seconds
    python examples/compare_proposers.py --prompts my.jsonl --per-category 3

A thin layer over :mod:`specdec.measure.speedup`: build named methods, run them interleaved on the same
prompts, print one markdown table per category. Add your own proposer to ``methods`` below.
"""

import argparse

from specdec.measure.speedup import (
    SAMPLE_PROMPTS,
    Method,
    Prompt,
    load_prompts,
    markdown,
    run_benchmark,
    specdec_method,
    summarize,
)
from specdec.engine.decoder import SpeculativeDecoder
from specdec.models import load_default, tiny_model
from specdec.proposers.suffix import SuffixProposer


def tiny_prompts():
    """Repetitive token prompts for the tiny model (two 'categories')."""
    return [Prompt("repeat", i, "", [3, 4, 5, 6, 7] * 4) for i in range(2)] + [
        Prompt("mixed", 10 + i, "", [8, 9, 10, 11, 12, 13, 8, 9, 10]) for i in range(2)
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tiny", action="store_true", help="tiny random model and synthetic prompts (CI)")
    ap.add_argument("--prompts", default=str(SAMPLE_PROMPTS))
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--categories", default="summarization,translation")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args(argv)

    if args.tiny:
        model, prompts, stops = tiny_model("llama"), tiny_prompts(), []
    else:
        model, tok = load_default()
        prompts = load_prompts(args.prompts, tok, categories=args.categories.split(","), per_category=args.per_category)
        stops = [tok.eos_token_id]
    plain = SpeculativeDecoder(model)
    vocab = plain.target.vocab_size
    suffix = SpeculativeDecoder(plain.target, SuffixProposer(vocab))
    fixed8 = SpeculativeDecoder(plain.target, SuffixProposer(vocab), max_budget=8, budget=8)
    methods: list[Method] = [
        specdec_method("plain", plain, stops),
        specdec_method("suffix (cost model)", suffix, stops),
        specdec_method("suffix (8 nodes)", fixed8, stops),
    ]
    runs = run_benchmark(methods, prompts, args.max_new_tokens)
    table = summarize(runs)
    print(markdown(table))
    return table


if __name__ == "__main__":
    main()
