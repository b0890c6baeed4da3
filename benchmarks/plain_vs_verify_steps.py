"""Seconds per step of plain decoding against a scored proposer's verify steps, same run, same prompts.

Why: ``trained_proposers.py`` reported Medusa-KD faster than its tokens per step allow, which
needs a verify step cheaper than a plain one. This runs, per prompt in turn, plain decoding, the
proposer, and a second plain decoder after it (an order effect would show as plain != plain2),
all through ``SpeculativeDecoder`` on one shared target, and prints seconds, steps and ms per step.

    python benchmarks/plain_vs_verify_steps.py [--proposer medusa:artifacts/medusa-kd-smollm2-135m]
        [--categories writing,coding] [--max-new-tokens 128] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trained_proposers import build  # noqa: E402

from specdec import SpeculativeDecoder  # noqa: E402
from specdec.measure.speedup import load_prompts, run_benchmark, specdec_method  # noqa: E402

DEFAULT_PROMPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data",
                               "prompts_dev.jsonl")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proposer", default="medusa:artifacts/medusa-kd-smollm2-135m")
    ap.add_argument("--prompts", default=DEFAULT_PROMPTS)
    ap.add_argument("--categories", default="writing,coding")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--max-budget", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.max_new_tokens < 1 or args.threads < 1:
        ap.error("--max-new-tokens and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    from specdec.models import load_default

    model, tok = load_default()
    prompts = load_prompts(args.prompts, tok, categories=args.categories.split(","), per_category=1)
    stops = [tok.eos_token_id]
    plain = SpeculativeDecoder(model)
    spec = SpeculativeDecoder(plain.target, build(args.proposer, model, tok), max_budget=args.max_budget)
    spec.ensure_cost_model()
    methods = [specdec_method("plain", plain, stops), specdec_method(args.proposer, spec, stops),
               specdec_method("plain2", SpeculativeDecoder(plain.target), stops)]
    print("| method | category | seconds | tokens | steps | ms / step |\n|---|---|---:|---:|---:|---:|")
    for r in run_benchmark(methods, prompts, args.max_new_tokens):
        steps = getattr(r.metrics, "steps", None) or 1
        print(f"| {r.method} | {r.category} | {r.seconds:.2f} | {len(r.tokens)} | {steps} | "
              f"{1000 * r.seconds / steps:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
