"""``specdec generate``: stream a chat reply with speculative decoding and print step metrics."""

from __future__ import annotations

import sys

from .common import PROPOSER_SPECS, add_budget_arg, add_model_args, check_spec, load_target, make_proposer, parse_budget


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text, streaming, with step metrics")
    p.add_argument("prompt", help="user message (chat template applied)")
    p.add_argument("--proposer", default="suffix", help=f"proposer spec: {PROPOSER_SPECS}")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    add_budget_arg(p)
    add_model_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from ..engine.decoder import SpeculativeDecoder
    from ..sampling.params import SamplingParams
    from ..prompts import chat_ids

    check_spec(args.proposer)
    budget = parse_budget(args.budget)
    model, tok = load_target(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    if args.raw:
        ids = tok(args.prompt).input_ids
    else:
        ids = chat_ids(tok, args.prompt)
    decoder = SpeculativeDecoder(model, make_proposer(args.proposer, model, tok), budget=budget)
    gen = torch.Generator().manual_seed(args.seed)
    out: list[int] = []
    shown = 0
    metrics = None
    for ev in decoder.stream(ids, args.max_new_tokens, sampling, generator=gen):
        out += ev.tokens
        text = tok.decode(out, skip_special_tokens=True)
        sys.stdout.write(text[shown:])
        sys.stdout.flush()
        shown = len(text)
        metrics = ev.metrics
    sys.stdout.write("\n")
    print(f"[{args.proposer}] {metrics.summary()}", file=sys.stderr)
    if metrics.verify_s:
        rate = metrics.tokens / metrics.total_s
        print(f"[{args.proposer}] {rate:.1f} tokens/s end to end", file=sys.stderr)
    return 0
