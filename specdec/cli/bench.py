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

from .common import PROPOSER_SPECS, add_budget_arg, add_model_args, check_spec, load_target, make_proposer, parse_budget


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmark proposers against plain and HF assisted decoding")
    p.add_argument("--prompts", default=None, help="Spec-Bench-format .jsonl (default: the bundled dev sample)")
    p.add_argument("--categories", default=None, help="comma-separated subset of categories (default: all)")
    p.add_argument("--per-category", type=int, default=2, help="prompts per category")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--proposers", default="suffix", help=f"comma-separated proposer specs: {PROPOSER_SPECS}")
    p.add_argument("--hf-lookup", type=int, default=10,
                   help="HF prompt_lookup_num_tokens for the HF prompt-lookup baseline (0 = skip it)")
    p.add_argument("--no-hf-generate", action="store_true",
                   help="skip the plain model.generate baseline (HF prompt lookup is then compared with specdec plain)")
    p.add_argument("--assistant-model", default=None, help="HF assistant model folder for HF assisted generation")
    p.add_argument("--out", default="bench_out", help="output folder")
    add_budget_arg(p)
    add_model_args(p)
    p.set_defaults(func=run)


def build_methods(args, model, stops, tokenizer=None):
    from ..bench import hf_method, specdec_method
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
    names = [n for n in (args.proposers or "").split(",") if n]
    cost_model, budget = None, parse_budget(args.budget)
    for name in names:
        if name == "none":
            raise SystemExit("--proposers: 'none' is plain decoding, which bench always runs")
        dec = SpeculativeDecoder(plain.target, make_proposer(name, model, tokenizer), cost_model=cost_model,
                                 budget=budget)
        if budget == "auto":
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

    from ..bench import SAMPLE_PROMPTS, load_note, load_prompts, markdown, plot, run_benchmark, summarize

    if args.per_category < 1 or args.max_new_tokens < 1:
        raise SystemExit("--per-category and --max-new-tokens must be >= 1")
    started, load_start = time.time(), os.getloadavg()[0]
    labels = [method_label(check_spec(spec)) for spec in (args.proposers or "").split(",") if spec]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise SystemExit(f"--proposers names {repeated} more than once (rows are keyed by name)")
    model, tok = load_target(args)
    cats = [c for c in args.categories.split(",") if c] if args.categories else None
    prompts = load_prompts(args.prompts or SAMPLE_PROMPTS, tok, categories=cats, per_category=args.per_category)
    stops = [tok.eos_token_id] if tok.eos_token_id is not None else []
    methods, cost_model = build_methods(args, model, stops, tok)
    if cost_model is not None:
        print(f"verify cost model: {cost_model.describe()}")
    runs = run_benchmark(methods, prompts, args.max_new_tokens, progress=lambda xs: tqdm(xs, desc="prompts", unit="prompt"))
    table = summarize(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    load = load_note(load_start, os.getloadavg()[0], os.cpu_count() or 1)
    header = (f"# specdec bench\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
              f"model={args.model or 'SmolLM2-135M-Instruct (embedded)'}; {len(prompts)} prompts; "
              f"max_new_tokens={args.max_new_tokens}; greedy; torch threads={torch.get_num_threads()}; "
              f"{platform.processor() or platform.machine()}; total {time.time() - started:.0f} s; {load}\n")
    text = markdown(table, header)
    (out / "bench.md").write_text(text)
    plot(table, out / "speedup.png")
    (out / "runs.json").write_text(json.dumps([
        {"method": r.method, "category": r.category, "seconds": r.seconds, "tokens": len(r.tokens),
         "accepted_hist": r.metrics.accepted_hist if r.metrics else None} for r in runs], indent=1))
    print(text)
    print(f"wrote {out / 'bench.md'}, {out / 'speedup.png'}, {out / 'runs.json'}")
    return table
