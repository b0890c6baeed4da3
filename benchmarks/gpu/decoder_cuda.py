"""GPU agenda step 2: the decoder end to end on CUDA with a real target, in bf16 and fp16.

For each dtype, on the first prompt of each chosen category of the bundled dev sample (the prompts
the committed artifacts' figures are quoted on), greedy:

1. **equality**: every method's tokens (``SpeculativeDecoder`` plain, suffix, hybrid, EAGLE-3, at
   batch 1 and in one batch of ``--batch``) against ``model.generate`` on the same prompt alone
   (:func:`specdec.models.clean_generate`). A divergence is reported with its position and the
   target's top-2 logit margin there (from one forward over the agreed prefix): in bf16/fp16 a verify
   forward over several positions rounds differently from generate's one-token step, so the argmax
   can flip where the two best logits are that close; a divergence at a wide margin is a bug;
2. **bench**: wall time (CUDA-synchronised) and tokens per verify step of each method, at batch 1
   (prompt by prompt) and batch ``--batch`` (one ragged batch), speedup over plain at the same batch;
   ``model.generate`` at batch 1 as the framework's own baseline.

Then **the decoder law** on the device: the fast exact cases of the CPU law suite
(``decoder_law_cases.py`` under tests/: suffix, suffix through the tree-attention op, Medusa and
EAGLE heads with random weights) over its context-dependent tiny target moved to the device in
float32, sampled with a generator on the device, G-tested against the exact law computed on a CPU
copy (the laws of the two copies differ by float32 rounding only).

EAGLE-3 artifacts are bound to the float32 checkpoint's fingerprint; the script checks that binding
on the float32 load, then serves them on the cast model (whose fingerprint differs by dtype).
Results go to ``--out`` (JSON) after every part, so a time cap that stops the script keeps what it
measured. ``--device cpu`` with a tiny target is the smoke run of ``scripts/gpu/run.sh --smoke``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
LAW_FAMILIES = ("suffix", "suffix_tree_op", "medusa", "eagle")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Results:
    """The JSON report, rewritten after every part."""

    def __init__(self, path: Path | None):
        self.path, self.data = path, {"errors": []}

    def save(self):
        if self.path is not None:
            self.path.write_text(json.dumps(self.data, indent=1))

    def error(self, where: str, exc: BaseException):
        self.data["errors"].append(f"{where}: {type(exc).__name__}: {str(exc)[:500]}")
        print(f"ERROR {where}: {exc}", file=sys.stderr, flush=True)
        self.save()


def bound_artifact(path: str | None, fp32_fingerprint: str) -> dict | None:
    if not path:
        return None
    manifest = Path(path) / "manifest.json"
    if not manifest.is_file():
        return {"path": path, "bound": False, "why": "no manifest.json"}
    fp = json.loads(manifest.read_text()).get("fingerprint")
    return {"path": path, "bound": fp == fp32_fingerprint, "fingerprint": fp}


@torch.no_grad()
def margin_at(model, prompt: list[int], agreed: list[int]) -> float:
    """The target's top-1 minus top-2 logit after ``prompt + agreed`` (one forward)."""
    ids = torch.tensor([prompt + agreed], device=model.device)
    top = torch.topk(model(input_ids=ids).logits[0, -1].float(), 2).values
    return float(top[0] - top[1])


def compare(model, prompt, ref: list[int], got: list[int]) -> dict | None:
    """None when equal, else where and how they diverge."""
    if got == ref:
        return None
    i = next((j for j, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
    return {"position": i, "lengths": [len(ref), len(got)],
            "margin": round(margin_at(model, prompt, ref[:i]), 5) if i < min(len(ref), len(got)) else None}


def decoders(model, tokenizer, methods: dict[str, str | None], batch: int):
    """One decoder per method; the verify cost curves (one row and ``batch`` rows) are measured by the
    first drafting one and shared by the rest."""
    from specdec.engine.decoder import SpeculativeDecoder
    from specdec.proposers.registry import make_proposer

    out, cost = {}, None
    for name, spec in methods.items():
        prop = None if spec is None else make_proposer(spec, model, tokenizer, allow_mismatch=True)
        dec = SpeculativeDecoder(model, prop, cost_model=cost)
        if prop is not None and cost is None:  # measured once per dtype, shared by every proposer
            cost = [dec.ensure_cost_model()] + ([dec.ensure_cost_model(batch)] if batch > 1 else [])
        out[name] = dec
    return out


def run_dtype(model32, tokenizer, dtype_name, prompts, args, methods, res: Results):
    from specdec.models import clean_generate

    device = torch.device(args.device)
    model = copy.deepcopy(model32).to(device, DTYPES[dtype_name]).eval()
    eos = tokenizer.eos_token_id
    stops = [eos] if eos is not None else []
    part = res.data.setdefault("dtypes", {}).setdefault(dtype_name, {"equality": {}, "bench": {}})
    n = args.max_new_tokens

    def generate(ids):
        x = torch.tensor([ids], device=device)
        return clean_generate(model, x, max_new_tokens=n, eos_token_id=eos, pad_token_id=eos if eos is not None
                              else 0)[0, len(ids):].tolist()

    generate(prompts[0][:4])  # warm-up
    refs, t_gen = [], 0.0
    for p in prompts:
        sync(device)
        t0 = time.perf_counter()
        refs.append(generate(p))
        sync(device)
        t_gen += time.perf_counter() - t0
    part["bench"]["hf_generate"] = {"batch1": {"tokens": sum(map(len, refs)), "seconds": round(t_gen, 4),
                                               "tokens_per_s": round(sum(map(len, refs)) / t_gen, 2)}}
    res.save()
    decs = decoders(model, tokenizer, methods, min(args.batch, len(prompts)))
    for name, dec in decs.items():
        dec.generate(prompts[0], 4, stop_tokens=stops)  # warm-up
        eq = part["equality"].setdefault(name, {})
        bench = part["bench"].setdefault(name, {})
        # batch 1, prompt by prompt
        outs, secs, steps = [], 0.0, 0
        for p in prompts:
            sync(device)
            t0 = time.perf_counter()
            r = dec.generate(p, n, stop_tokens=stops)
            sync(device)
            secs += time.perf_counter() - t0
            outs.append(r.tokens)
            steps += r.metrics.steps
        bench["batch1"] = _bench_row(outs, secs, steps, len(prompts))
        eq["batch1"] = _equality(model, prompts, refs, outs)
        res.save()
        # one ragged batch
        group = prompts[: args.batch]
        sync(device)
        t0 = time.perf_counter()
        rs = dec.generate_batch(group, n, stop_tokens=stops)
        sync(device)
        secs = time.perf_counter() - t0
        outs = [r.tokens for r in rs]
        bench[f"batch{len(group)}"] = _bench_row(outs, secs, sum(r.metrics.steps for r in rs), len(group))
        eq[f"batch{len(group)}"] = _equality(model, group, refs[: len(group)], outs)
        res.save()
        print(f"{dtype_name} {name}: batch 1 {bench['batch1']['tokens_per_s']:.1f} tok/s, "
              f"{bench['batch1']['tokens_per_step']} tok/step, equal {eq['batch1']['equal']}/{eq['batch1']['total']}; "
              f"batch {len(group)} {bench[f'batch{len(group)}']['tokens_per_s']:.1f} tok/s, equal "
              f"{eq[f'batch{len(group)}']['equal']}/{eq[f'batch{len(group)}']['total']}", flush=True)
    for b in ("batch1", f"batch{min(args.batch, len(prompts))}"):
        base = part["bench"].get("plain", {}).get(b)
        for name in decs:
            row = part["bench"][name].get(b)
            if base and row:
                row["speedup_vs_plain"] = round(base["seconds"] / row["seconds"], 3)
    res.save()


def _bench_row(outs, seconds, steps, requests):
    tokens = sum(map(len, outs))
    return {"tokens": tokens, "seconds": round(seconds, 4), "tokens_per_s": round(tokens / seconds, 2),
            "steps": steps, "tokens_per_step": round((tokens - requests) / steps, 3) if steps else None}


def _equality(model, prompts, refs, outs):
    divs = []
    for i, (p, ref, got) in enumerate(zip(prompts, refs, outs)):
        d = compare(model, p, ref, got)
        if d is not None:
            divs.append({"prompt": i, **d})
    margins = [d["margin"] for d in divs if d["margin"] is not None]
    return {"equal": len(prompts) - len(divs), "total": len(prompts), "divergences": divs,
            "max_divergence_margin": max(margins) if margins else None}


def law(args, res: Results):
    """The fast exact cases of the CPU law suite, on the device (see the module docstring)."""
    from tests.conformance import decoder_law_cases as cases  # the CPU suite's cases (run from the repo root)
    from specdec.conformance.decoder_law import WINDOWS, exact_decoder_law
    from specdec.conformance.suite import window_law_tests

    device = torch.device(args.device)
    model_cpu = cases.target_model()
    model = copy.deepcopy(model_cpu).to(device)
    specs = [s for s in cases.EXACT_SPECS if not s.slow and s.family in LAW_FAMILIES]
    out = res.data.setdefault("law", {"per_test_alpha": cases.PER_TEST_ALPHA, "device": str(device), "cases": []})
    for spec in specs:
        t0 = time.perf_counter()
        trials = args.law_trials or spec.trials
        case = cases.case(model, spec)
        decoder = case.decoder()
        gen = torch.Generator(device=device).manual_seed(cases.seed_of(spec))
        requests = [list(p) for _ in range(trials) for p in case.prompts]
        step = case.batch or len(requests)
        results = []
        for s in range(0, len(requests), step):
            results += decoder.generate_batch(requests[s:s + step], case.length, case.sampling, stop_tokens=(),
                                              generator=gen)
        tokens = torch.tensor([r.tokens for r in results], dtype=torch.long)
        strata = [(tokens[i::len(case.prompts)], exact_decoder_law(model_cpu, p, case.length, case.sampling))
                  for i, p in enumerate(case.prompts)]
        tests = window_law_tests(case.name, strata, cases.V, WINDOWS)
        accepted = sum(r.metrics.accepted for r in results)
        steps = sum(r.metrics.steps for r in results)
        row = {"case": case.name, "trials": trials, "prompts": len(case.prompts),
               "p_values": [round(t.p_value, 6) for t in tests], "rejected": sum(t.p_value < cases.PER_TEST_ALPHA
                                                                                  for t in tests),
               "accepted_per_step": round(accepted / max(steps, 1), 3), "seconds": round(time.perf_counter() - t0, 2)}
        out["cases"].append(row)
        res.save()
        print(f"law {row['case']}: p {row['p_values']}, rejected {row['rejected']}/{len(tests)}, "
              f"accepted/step {row['accepted_per_step']}", flush=True)
    out["passed"] = all(c["rejected"] == 0 and c["accepted_per_step"] > 0 for c in out["cases"])
    res.save()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a .gguf file or a model folder")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--prompts", default=None, help="prompt JSONL (default: the bundled dev sample)")
    ap.add_argument("--categories", default=None, help="comma-separated (default: every category)")
    ap.add_argument("--max-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--eagle3", default=None, help="EAGLE-3 artifact for the eagle and hybrid rows")
    ap.add_argument("--extra-eagle3", default=None, help="a second EAGLE-3 artifact (e.g. just trained), if present")
    ap.add_argument("--law-trials", type=int, default=None, help="trials per law case (default: the suite's)")
    ap.add_argument("--skip-law", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    bad = [d for d in args.dtypes.split(",") if d not in DTYPES]
    if bad or args.batch < 1 or args.max_prompts < 1 or args.max_new_tokens < 1:
        ap.error(f"--dtypes from {sorted(DTYPES)}, --batch/--max-prompts/--max-new-tokens >= 1 (bad: {bad})")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no CUDA device")
    from specdec.artifacts import target_fingerprint
    from specdec.measure.speedup import SAMPLE_PROMPTS, load_prompts
    from specdec.models import load_target

    res = Results(args.out)
    res.data.update({"model": args.model, "device": args.device, "torch": torch.__version__,
                     "max_new_tokens": args.max_new_tokens, "batch": args.batch})
    model32, tok, name = load_target(args.model, device="cpu")
    fp = target_fingerprint(model32)
    res.data["fingerprint_fp32"] = fp
    recs = load_prompts(args.prompts or SAMPLE_PROMPTS, tok, per_category=1,
                        categories=args.categories.split(",") if args.categories else None)[: args.max_prompts]
    prompts = [r.ids for r in recs]
    res.data["prompts"] = [{"category": r.category, "question_id": r.question_id, "tokens": len(r.ids)} for r in recs]
    methods: dict[str, str | None] = {"plain": None, "suffix": "suffix"}
    for key, path in (("eagle3", args.eagle3), ("eagle3-extra", args.extra_eagle3)):
        info = bound_artifact(path, fp) if path and Path(path).is_dir() else None
        res.data.setdefault("artifacts", {})[key] = info or {"path": path, "bound": False, "why": "absent"}
        if info and info["bound"]:
            methods[key] = f"eagle:{path}"
            methods[f"hybrid-{key}"] = f"hybrid:suffix+eagle:{path}"
    res.save()
    for d in args.dtypes.split(","):
        try:
            run_dtype(model32, tok, d, prompts, args, methods, res)
        except Exception as exc:  # report, then the next dtype and the law still run
            res.error(f"dtype {d}", exc)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the dtype's model copy is gone with run_dtype's frame
    if not args.skip_law:
        try:
            law(args, res)
        except Exception as exc:
            res.error("law", exc)
    res.save()
    return 1 if res.data["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
