"""``specdec bench``: plain decoding vs specdec proposers vs Hugging Face assisted generation.

Writes ``bench.md`` (one table per category + overall), ``speedup.png`` and ``runs.json`` under
``--out``. Everything runs in one process on the same prompts, interleaved prompt by prompt.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from .args import UsageError, add_model_args, add_proposer_args, csv, non_negative_int, positive_int, proposers
from .common import add_budget_arg, load_target, log, make_proposer


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmark proposers against plain and HF assisted decoding")
    p.add_argument("--prompts", default=None, help="Spec-Bench-format .jsonl (default: the bundled dev sample)")
    p.add_argument("--categories", type=csv, default=None, help="comma-separated subset of categories (default: all)")
    p.add_argument("--per-category", type=positive_int, default=2, help="prompts per category")
    p.add_argument("--max-new-tokens", type=positive_int, default=64)
    add_proposer_args(p, default=["suffix"])
    p.add_argument("--hf-lookup", type=non_negative_int, default=10,
                   help="HF prompt_lookup_num_tokens for the HF prompt-lookup baseline (0 = skip it)")
    p.add_argument("--no-hf-generate", action="store_true",
                   help="skip the plain model.generate baseline (HF prompt lookup is then compared with specdec plain)")
    p.add_argument("--assistant-model", default=None, help="HF assistant model folder for HF assisted generation")
    p.add_argument("--cost", default=None, metavar="FILE",
                   help="verify cost curve to reuse (as bench writes to <out>/verify_cost.json); measured when omitted")
    p.add_argument("--out", default="bench_out", help="output folder")
    add_budget_arg(p)
    add_model_args(p)
    p.set_defaults(func=run)


def build_methods(args, model, stops, tokenizer=None, cost_model=None):
    from ..measure.speedup import hf_method, specdec_method
    from ..engine.decoder import SpeculativeDecoder

    plain = SpeculativeDecoder(model)
    methods = [specdec_method("plain", plain, stops)]
    if not args.no_hf_generate:
        methods.append(hf_method("hf_generate", model, stops))
    if args.hf_lookup:
        methods.append(hf_method("hf_prompt_lookup", model, stops, prompt_lookup_num_tokens=args.hf_lookup))
    if args.assistant_model:
        import torch
        from transformers import AutoModelForCausalLM

        assistant = AutoModelForCausalLM.from_pretrained(args.assistant_model, dtype=torch.float32,
                                                         local_files_only=True).eval()
        methods.append(hf_method("hf_assisted", model, stops, assistant_model=assistant))
    for name in proposers(args):
        prop = make_proposer(name, model, tokenizer, allow_mismatch=args.allow_mismatch)
        dec = SpeculativeDecoder(plain.target, prop, cost_model=cost_model, budget=args.budget)
        if args.budget == "auto" and cost_model is None:
            log("calibrating the verify cost curve (a few seconds; --cost FILE reuses a saved one)")
            cost_model = dec.ensure_cost_model()  # measured once, shared by every proposer
        methods.append(specdec_method(method_label(name), dec, stops))
    return methods, cost_model


def method_label(spec: str) -> str:
    """The row name of a proposer spec in the tables: the spec itself, except that a warmed
    suffix proposer is named by its responses file (``suffix-warm:<file name>``)."""
    return f"suffix-warm:{Path(spec.partition(':')[2]).name}" if spec.startswith("suffix:") else spec


def run(args) -> int:
    execute(args)
    return 0


def execute(args):
    """Run the benchmark, write the report files, return ``summarize(runs)``'s table."""
    from tqdm import tqdm

    from ..measure.speedup import SAMPLE_PROMPTS, load_note, load_prompts, markdown, plot, run_benchmark, summarize
    from ..estimate.verify_cost import VerifyCostModel
    from ..prompts import read_prompt_records

    started, load_start = time.time(), os.getloadavg()[0]
    specs = proposers(args)
    if "none" in specs:
        raise UsageError("--proposer none is plain decoding, which bench always runs")
    labels = [method_label(spec) for spec in specs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise UsageError(f"--proposers names {repeated} more than once (rows are keyed by name)")
    path = args.prompts or SAMPLE_PROMPTS
    read_prompt_records(path, categories=args.categories, per_category=args.per_category)  # before the model loads
    cost_model = VerifyCostModel.load(args.cost) if args.cost else None
    model, tok = load_target(args)
    prompts = load_prompts(path, tok, categories=args.categories, per_category=args.per_category)
    stops = [tok.eos_token_id] if tok.eos_token_id is not None else []
    methods, cost_model = build_methods(args, model, stops, tok, cost_model)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if cost_model is not None:
        print(f"verify cost model: {cost_model.describe()}")
        cost_model.save(out / "verify_cost.json")
    runs = run_benchmark(
        methods, prompts, args.max_new_tokens, progress=lambda xs: tqdm(xs, desc="prompts", unit="prompt")
    )
    table = summarize(runs)
    import torch

    load = load_note(load_start, os.getloadavg()[0], os.cpu_count() or 1)
    header = (
        f"# specdec bench\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"model={'SmolLM2-135M-Instruct (embedded)' if args.model == 'default' else args.model}; "
        f"{len(prompts)} prompts; max_new_tokens={args.max_new_tokens}; greedy; "
        f"torch threads={torch.get_num_threads()}; {platform.processor() or platform.machine()}; "
        f"total {time.time() - started:.0f} s; {load}\n"
    )
    text = markdown(table, header)
    (out / "bench.md").write_text(text)
    plot(table, out / "speedup.png")
    (out / "runs.json").write_text(
        json.dumps(
            [
                {
                    "method": r.method,
                    "category": r.category,
                    "seconds": r.seconds,
                    "tokens": len(r.tokens),
                    "accepted_hist": r.metrics.accepted_hist if r.metrics else None,
                }
                for r in runs
            ],
            indent=1,
        )
    )
    print(text)
    print(f"wrote {out / 'bench.md'}, {out / 'speedup.png'}, {out / 'runs.json'}")
    return table
