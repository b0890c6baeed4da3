"""``specdec generate``: stream a chat reply with speculative decoding and print step metrics."""

from __future__ import annotations

import sys

from .args import add_model_args, add_proposer_args, bounded, non_negative, positive_int, probability, proposers, unit
from .common import add_budget_arg, load_target, log, make_proposer


def register(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate text, streaming, with step metrics")
    p.add_argument("prompt", help="user message (chat template applied)")
    add_proposer_args(p, default=["suffix"])
    p.add_argument("--max-new-tokens", type=positive_int, default=128)
    p.add_argument("--temperature", type=non_negative, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=positive_int, default=None)
    p.add_argument("--top-p", type=probability, default=1.0)
    p.add_argument("--min-p", type=unit, default=0.0)
    p.add_argument("--seed", type=bounded(int), default=0)
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--cost", default=None, metavar="FILE",
                   help="verify cost curve to reuse (bench writes one to <out>/verify_cost.json); else measured")
    add_budget_arg(p)
    add_model_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import torch

    from ..engine.decoder import SpeculativeDecoder
    from ..estimate.verify_cost import VerifyCostModel
    from ..prompts import chat_ids
    from ..sampling.params import SamplingParams
    from .args import UsageError

    specs = proposers(args)
    if len(specs) != 1:
        raise UsageError(f"generate takes one proposer, got {specs}")
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p)  # checked before the load
    cost = VerifyCostModel.load(args.cost) if args.cost else None
    model, tok = load_target(args)
    ids = tok(args.prompt).input_ids if args.raw else chat_ids(tok, args.prompt)
    decoder = SpeculativeDecoder(model, make_proposer(specs[0], model, tok, allow_mismatch=args.allow_mismatch),
                                 budget=args.budget, cost_model=cost)
    if decoder.proposer is not None and args.budget == "auto" and cost is None:
        log("calibrating the verify cost curve before the first token (a few seconds; --cost FILE skips it)")
        decoder.ensure_cost_model()
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
    print(f"[{specs[0]}] {metrics.summary()}", file=sys.stderr)
    if metrics.verify_s:
        rate = metrics.tokens / metrics.total_s
        print(f"[{specs[0]}] {rate:.1f} tokens/s end to end", file=sys.stderr)
    return 0
