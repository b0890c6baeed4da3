"""``specdec bench``: plain decoding vs specdec proposers vs Hugging Face assisted generation.

Writes ``bench.md`` (one table per category + overall), ``speedup.png`` and ``runs.json`` under
``--out``. Everything runs in one process on the same prompts, interleaved prompt by prompt.

``--custom-generate`` benchmarks ``model.generate`` itself instead, on left-padded batches of each
``--batch-sizes``: plain, Hugging Face prompt lookup and assisted decoding (batch 1, as Hugging Face
runs them) and specdec through ``custom_generate`` with each ``--proposer`` (``none``: specdec's loop
without drafting, which separates what speculation gains from what the loop itself does); it writes
``generate.md`` and ``generate_runs.json`` (speedups over plain ``model.generate`` at the same batch).
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
    p.add_argument("--custom-generate", action="store_true",
                   help="benchmark model.generate itself on left-padded batches: plain, HF prompt lookup / assisted "
                        "(batch 1) and specdec via custom_generate with each --proposer")
    p.add_argument("--batch-sizes", type=lambda t: [positive_int(x) for x in csv(t)], default=[1, 4, 8],
                   metavar="1,4,8", help="--custom-generate: batch sizes (each category's prompts in batches of each)")
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


def short_label(spec: str) -> str:
    """A table column for a proposer spec: :func:`method_label`, with any directory named by its last
    part (``hybrid:suffix+eagle:artifacts/eagle3-smollm2-135m`` -> ``hybrid:suffix+eagle:eagle3-smollm2-135m``)."""
    label = method_label(spec)
    head, sep, path = label.rpartition(":")
    return f"{head}{sep}{Path(path).name}" if sep and ("/" in path or Path(path).exists()) else label


def run(args) -> int:
    if args.custom_generate:
        execute_generate(args)
    else:
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


def generate_methods(args, model, tok, cost_model=None):
    """``(methods_for, cost, eos_id, pad_id)``: ``methods_for(batch)`` builds the ``--custom-generate``
    methods with fresh specdec decoders (no proposer state carried from one batch size to the next),
    each reused across the calls of its batch size; the verify cost curves (one row, read from
    ``--cost`` when given, and each batch size) are measured once and shared, and ``cost["model"]``
    holds the one-row curve afterwards."""
    import torch

    from ..measure.speedup import generate_method
    from ..engine.decoder import SpeculativeDecoder
    from ..integrations.hf import generate

    eos = tok.eos_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else (eos if eos is not None else 0)
    assistant = None
    if args.assistant_model:
        from transformers import AutoModelForCausalLM

        assistant = AutoModelForCausalLM.from_pretrained(args.assistant_model, dtype=torch.float32,
                                                         local_files_only=True).eval()
    cost = {"model": cost_model}
    measured = {}

    def curves(batch: int):
        """The one-row and ``batch``-row verify cost curves, each measured once and shared by every
        decoder (the one-row curve read from ``--cost`` when given); None for a fixed budget."""
        if args.budget != "auto":
            return None
        from ..estimate.verify_cost import VerifyCostModel
        from ..verify.hf import HFTarget

        for b in {1, batch}:
            if b not in measured and not (b == 1 and cost["model"] is not None):
                log(f"calibrating the verify cost curve of {b} row(s) (a few seconds)")
                measured[b] = VerifyCostModel.calibrate(HFTarget(model), batch=b)
        cost["model"] = cost["model"] or measured[1]
        return [cost["model"]] + [measured[b] for b in sorted(measured) if b > 1]

    def methods_for(batch: int):
        methods = [generate_method("hf_generate", model, eos, pad)]
        if args.hf_lookup:
            methods.append(generate_method("hf_prompt_lookup", model, eos, pad, max_batch=1,
                                           prompt_lookup_num_tokens=args.hf_lookup))
        if assistant is not None:
            methods.append(generate_method("hf_assisted", model, eos, pad, max_batch=1, assistant_model=assistant))
        for spec in proposers(args):
            prop = make_proposer(spec, model, tok, allow_mismatch=args.allow_mismatch)
            dec = SpeculativeDecoder(model, prop, cost_model=curves(batch), budget=args.budget)
            methods.append(generate_method(f"custom_generate:{short_label(spec)}", model, eos, pad,
                                           custom_generate=generate, decoder=dec))
        if assistant is not None:
            methods.append(generate_method("custom_generate:assistant", model, eos, pad, custom_generate=generate,
                                           assistant_model=assistant, target_tokenizer=tok, budget=args.budget,
                                           cost_model=curves(batch)))
        return methods

    return methods_for, cost, eos, pad


def execute_generate(args):
    """Run the ``--custom-generate`` benchmark, write ``generate.md`` and ``generate_runs.json``, return
    :func:`specdec.measure.speedup.summarize_generate`'s table."""
    from tqdm import tqdm

    from ..measure.speedup import SAMPLE_PROMPTS, generate_markdown, load_note, load_prompts, run_generate_benchmark
    from ..measure.speedup import summarize_generate
    from ..estimate.verify_cost import VerifyCostModel
    from ..prompts import read_prompt_records

    started, load_start = time.time(), os.getloadavg()[0]
    proposers(args)  # a bad spec is refused before the model loads
    if args.no_hf_generate:
        raise UsageError("--custom-generate compares with plain model.generate: drop --no-hf-generate")
    path = args.prompts or SAMPLE_PROMPTS
    records = read_prompt_records(path, categories=args.categories, per_category=args.per_category)
    if max(args.batch_sizes) > args.per_category:
        raise UsageError(f"--batch-sizes {max(args.batch_sizes)} needs --per-category >= {max(args.batch_sizes)}")
    cost_model = VerifyCostModel.load(args.cost) if args.cost else None
    model, tok = load_target(args)
    prompts = load_prompts(path, tok, categories=args.categories, per_category=args.per_category)
    methods_for, cost, eos, pad = generate_methods(args, model, tok, cost_model)
    runs = run_generate_benchmark(methods_for, prompts, args.batch_sizes, args.max_new_tokens, eos, pad,
                                  progress=lambda xs: tqdm(xs, desc="batches", unit="batch"))
    table = summarize_generate(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if cost["model"] is not None:
        cost["model"].save(out / "verify_cost.json")
    import torch

    load = load_note(load_start, os.getloadavg()[0], os.cpu_count() or 1)
    header = (
        f"# model.generate vs custom_generate\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"model={'SmolLM2-135M-Instruct (embedded)' if args.model == 'default' else args.model}; "
        f"prompts={Path(path).name}, {len(records)} records; max_new_tokens={args.max_new_tokens}; greedy; "
        f"batch sizes {args.batch_sizes}; budget={args.budget}; torch threads={torch.get_num_threads()}; "
        f"{platform.processor() or platform.machine()}; total {time.time() - started:.0f} s; {load}\n\n"
        "Each cell: tokens/s (speedup over hf_generate at the same batch size and category). Hugging Face's "
        "prompt lookup and assisted decoding run at batch 1 only; custom_generate methods reuse one decoder per "
        "batch size (its proposer learns across that size's calls).\n"
    )
    text = generate_markdown(table, header)
    (out / "generate.md").write_text(text)
    (out / "generate_runs.json").write_text(json.dumps(
        [{"method": r.method, "category": r.category, "batch": r.batch, "seconds": r.seconds, "tokens": r.tokens,
          "steps": r.steps, "accepted": r.accepted} for r in runs], indent=1))
    print(text)
    print(f"wrote {out / 'generate.md'}, {out / 'generate_runs.json'}")
    return table
