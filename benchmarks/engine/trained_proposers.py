"""Trained proposers beside the suffix proposer and plain decoding, per category, in one run.

For each selected dev prompt (greedy, ``--max-new-tokens``), every method decodes in turn
(``specdec.measure.speedup.run_benchmark``: one warm-up each, then prompt by prompt so load changes hit all
methods alike) through :class:`~specdec.SpeculativeDecoder` with the measured verify cost
model (``--budget auto`` up to ``--max-budget`` nodes). Per category and overall:

* ``tok/step``: tokens emitted per verify step (accepted drafts + the bonus token), online;
* ``propose ms``: proposer time per step, online;
* ``speedup``: plain decoding's seconds / the method's seconds on the same prompts, with a 95%
  paired bootstrap interval over prompts (``speedup_ci``), and beside the suffix proposer
  (``vs_suffix``, > 1: faster than suffix, with ``vs_suffix_ci``): with 2-3 prompts a category, a
  difference inside the interval is noise, not a ranking;
* ``replay@B``: tokens per step of an exact greedy replay at a *fixed* budget ``B``
  (``--replay-budget``, default 32; :func:`specdec.measure.greedy_replay.replay_sequence`), and
  acceptance by depth from it (``P(accepted >= d)``): what the drafts could give without the cost
  model's pruning.

``--fixed-ask SPEC ...`` adds those proposers once more, asking for ``--max-budget`` nodes every
step instead of the sizer's adaptive ask: the same-run A/B of what the adaptive ask saves.
``--no-model-gate SPEC ...`` does the same for hybrids drafting EAGLE every step, without their
model gate. The replay always runs hybrids without the gate (it measures the drafts, not their cost).
``--bucket-gate SPEC ...`` adds hybrids whose model gate ignores each request's own evidence
(``ModelGate(request_prior=inf)``: the lookup bucket's mean alone, the gate before 2026-12-02 21:50).
``--fp32-head SPEC ...`` adds trained proposers whose LM-head rows stay float32 (method '<spec> [fp32
head]'; the default rounds them to float16, ``specdec.proposers.reduced_vocab.DraftHead``), online
and in the replay: the same-run A/B of what the rounding saves and what it costs in acceptance.

Outputs must equal plain decoding's (``mismatches`` counts any that do not). The uptime load is
recorded before and after; quote only ratios from one run.

    python -m benchmarks.engine.trained_proposers --prompts ../shared/data/prompts_dev.jsonl --per-category 2 \\
        --proposers suffix eagle:artifacts/eagle3-smollm2-135m hybrid:suffix+eagle:artifacts/eagle3-smollm2-135m \\
        --json benchmarks/data/trained_proposers.json
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections import defaultdict

import torch

from benchmarks.common.answers import Features, greedy_outputs
from benchmarks.common.paths import DATA
from benchmarks.common.report import accepted_histogram, depth_acceptance, ratio_ci, save_json
from specdec import SpeculativeDecoder
from specdec.artifacts import target_fingerprint
from specdec.cli.args import proposer_spec
from specdec.control.model_gate import ModelGate
from specdec.measure.greedy_replay import replay_sequence
from specdec.measure.speedup import load_prompts, run_benchmark, specdec_method
from specdec.proposers.hybrid import HybridProposer
from specdec.proposers.registry import make_proposer


def build(spec: str, model, tokenizer, head_dtype: str | None = None):
    """A proposer from a spec; ``drafter:<artifact dir>`` is a distilled drafter (``specdec train
    draft | draft-kd``) driven as an EAGLE-2-style dynamic tree (``--drafter-width`` wide).
    ``head_dtype``: see :func:`specdec.proposers.registry.make_proposer`."""
    if spec.startswith("drafter:"):
        from specdec.proposers.draft_model import DraftModelProposer
        from specdec.training.distilled_drafter import load_drafter

        drafter, _ = load_drafter(spec.partition(":")[2], model)
        return DraftModelProposer(drafter, target_tokenizer=tokenizer, draft_tokenizer=tokenizer, mode="tree",
                                  width=DRAFTER_WIDTH, min_path_prob=0.05, max_depth=6)
    return make_proposer(spec, model, tokenizer, head_dtype=head_dtype)


DRAFTER_WIDTH = 2

#: Same-run variants, by flag: (method suffix, the proposer kinds it takes (empty: any), what it decodes).
VARIANTS = {
    "--fixed-ask": (" [fixed ask]", (), "proposers asking --max-budget nodes every step, beside the sizer's "
                    "adaptive ask (DraftSizer.ask_for)"),
    "--no-model-gate": (" [no gate]", ("hybrid",), "hybrids drafting EAGLE every step, beside the hybrid's model gate"),
    "--bucket-gate": (" [bucket gate]", ("hybrid",), "hybrids with a model gate that ignores per-request evidence"),
    "--fp32-head": (" [fp32 head]", ("medusa", "eagle", "hybrid"), "trained proposers with float32 LM-head rows, "
                    "online and in the replay, beside the default float16-rounded rows"),
}


#: The hybrid's model gate in each gate variant (None: no gate).
GATE_VARIANTS = {"--no-model-gate": lambda: None, "--bucket-gate": lambda: ModelGate(request_prior=math.inf)}


def table(runs, prompts, plain_name="plain", pair_with="suffix") -> dict:
    """Per category and overall, per method: tokens per step, propose ms, speedup over plain with its
    95% paired bootstrap interval over prompts (``speedup_ci``), and, beside ``pair_with`` when it
    ran, the method's time ratio to it (``vs_<pair_with>``: > 1 is faster) with its interval."""
    rows = defaultdict(lambda: defaultdict(lambda: {"seconds": 0.0, "tokens": 0, "steps": 0, "propose_s": 0.0,
                                                    "mismatches": 0, "per_prompt": []}))
    ref = {}
    for r in runs:
        if r.method == plain_name:
            ref[(r.category, len([k for k in ref if k[0] == r.category]))] = r.tokens
    seen = defaultdict(int)
    for r in runs:
        i = seen[(r.method, r.category)]
        seen[(r.method, r.category)] += 1
        for cat in (r.category, "overall"):
            row = rows[cat][r.method]
            row["seconds"] += r.seconds
            row["per_prompt"].append(r.seconds)
            row["tokens"] += len(r.tokens)
            row["steps"] += r.metrics.steps
            row["propose_s"] += r.metrics.propose_s
            row["mismatches"] += int(ref.get((r.category, i)) != r.tokens)
    out = {}
    for cat, methods in rows.items():
        base = methods[plain_name]
        pair = methods.get(pair_with)
        out[cat] = {}
        for m, v in methods.items():
            row = out[cat][m] = {
                "tok_per_step": round((v["tokens"] - 1) / max(v["steps"], 1), 3) if m != plain_name else 1.0,
                "propose_ms": round(1000 * v["propose_s"] / max(v["steps"], 1), 2),
                "speedup": round(base["seconds"] / v["seconds"], 3),
                "speedup_ci": [round(x, 3) for x in ratio_ci(base["per_prompt"], v["per_prompt"])],
                "seconds": round(v["seconds"], 1), "mismatches": v["mismatches"]}
            if pair is not None and m not in (plain_name, pair_with):
                row[f"vs_{pair_with}"] = round(pair["seconds"] / v["seconds"], 3)
                row[f"vs_{pair_with}_ci"] = [round(x, 3) for x in ratio_ci(pair["per_prompt"], v["per_prompt"])]
    return out


def replays(model, variants, prompts, outputs, budget: int, tokenizer) -> dict:
    """``variants``: ``(spec, label suffix, head_dtype)``; results keyed by spec + suffix."""
    feats = Features(model)
    res = {}
    for spec, variant, head_dtype in variants:
        prop = build(spec, model, tokenizer, head_dtype)
        if isinstance(prop, HybridProposer):
            prop.model_gate = None  # a replay measures what the drafts give, not what drafting costs
        layers = getattr(prop, "target_layers", None)
        per_cat, hist_all = defaultdict(lambda: [0, 0, 0.0]), [0] * (budget + 1)
        for p in prompts:
            out = outputs[str(p.question_id)]
            if len(out) < 2:
                continue
            ids = p.ids + out
            hidden = feats.get(layers, str(p.question_id), ids) if prop.requires_target_hidden else None
            r = replay_sequence(prop, ids, len(p.ids), budget, hidden=hidden)
            for cat in (p.category, "overall"):
                per_cat[cat][0] += r.emitted
                per_cat[cat][1] += r.steps
                per_cat[cat][2] += r.propose_s
            hist_all = [a + b for a, b in zip(hist_all, accepted_histogram(r.accepted, budget))]
        res[spec + variant] = {
            "tok_per_step": {c: round(v[0] / max(v[1], 1), 3) for c, v in sorted(per_cat.items())},
            "propose_ms": round(1000 * per_cat["overall"][2] / max(per_cat["overall"][1], 1), 2),
            "depth_acceptance": depth_acceptance(hist_all), "hist": hist_all}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", required=True, help="Spec-Bench-format prompts (../shared/data/prompts_dev.jsonl)")
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--categories", default=None, help="comma-separated subset (default: all)")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--proposers", nargs="+", required=True,
                    help="proposer specs (specdec bench's syntax, plus drafter:<distilled drafter artifact>)")
    ap.add_argument("--max-budget", type=int, default=32, help="most nodes the cost model may verify per step")
    ap.add_argument("--replay-budget", type=int, default=32, help="fixed budget of the greedy replay (0 = skip)")
    ap.add_argument("--no-online", action="store_true", help="replay only (no timed decoding)")
    for flag, (label, kinds, text) in VARIANTS.items():
        ap.add_argument(flag, nargs="*", default=[], metavar="SPEC", help=f"also decode these {text} (method "
                        f"'<spec>{label}'; {'/'.join(kinds) if kinds else 'any'} proposers)")
    ap.add_argument("--json", default=None, help="write everything here")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is steadier on a shared machine)")
    args = ap.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    specs = [s if s.startswith("drafter:") else proposer_spec(s) for s in args.proposers]
    extra = []  # (spec, method suffix, flag): the same-run variants
    for flag, (label, kinds, _) in VARIANTS.items():
        for spec in getattr(args, flag[2:].replace("-", "_")):  # refused before the model loads
            spec = proposer_spec(spec)
            if kinds and spec.partition(":")[0] not in kinds:
                names = ", ".join(kinds[:-1]) + " or " + kinds[-1] if len(kinds) > 1 else kinds[0]
                ap.error(f"{flag} takes {names} proposers, got {spec!r}")
            extra.append((spec, label, flag))
    from specdec.models import load_default

    load0 = os.getloadavg()
    started = time.time()
    model, tok = load_default()
    cats = args.categories.split(",") if args.categories else None
    prompts = load_prompts(args.prompts, tok, categories=cats, per_category=args.per_category)
    stops = [tok.eos_token_id]
    facts = {"prompts": os.path.basename(args.prompts), "per_category": args.per_category,
             "question_ids": [p.question_id for p in prompts], "max_new_tokens": args.max_new_tokens,
             "max_budget": args.max_budget, "threads": torch.get_num_threads(), "target": target_fingerprint(model)}
    if not args.no_online:
        plain = SpeculativeDecoder(model)
        methods = [specdec_method("plain", plain, stops)]
        cost = None
        for spec, variant, flag in [(s, "", None) for s in specs] + extra:
            prop = build(spec, model, tok, "float32" if flag == "--fp32-head" else None)
            if flag in GATE_VARIANTS:
                assert isinstance(prop, HybridProposer), spec  # a hybrid: checked before the model loaded
                prop.model_gate = GATE_VARIANTS[flag]()
            dec = SpeculativeDecoder(plain.target, prop, cost_model=cost, max_budget=args.max_budget)
            dec.sizer.adaptive_ask = flag != "--fixed-ask"
            cost = dec.ensure_cost_model()
            methods.append(specdec_method(spec + variant, dec, stops))
        from tqdm import tqdm

        runs = run_benchmark(methods, prompts, args.max_new_tokens,
                             progress=lambda xs: tqdm(xs, desc="prompts", unit="prompt"))
        facts["online"] = table(runs, prompts)
        facts["online_load"] = {"before": round(load0[0], 2), "after": round(os.getloadavg()[0], 2)}
        outputs = {str(r_p.question_id): r.tokens for r, r_p in
                   zip([r for r in runs if r.method == "plain"], prompts)}
        def label(m):  # the proposer kind and its variant: "hybrid[bucket gate]"
            variant = next((v for v, _, _ in VARIANTS.values() if m.endswith(v)), "")
            return m[: len(m) - len(variant)].split(":")[0] + variant.strip()

        for cat in sorted(facts["online"]):
            print(f"{cat:15s} " + "  ".join(
                f"{label(m)}={v['tok_per_step']:.2f}t/s {v['propose_ms']:.1f}ms {v['speedup']:.2f}x"
                f"[{v['speedup_ci'][0]:.2f}-{v['speedup_ci'][1]:.2f}]{'!' * v['mismatches']}"
                + (f" ({v['vs_suffix']:.2f}x suffix [{v['vs_suffix_ci'][0]:.2f}-{v['vs_suffix_ci'][1]:.2f}])"
                   if "vs_suffix" in v else "") for m, v in facts["online"][cat].items()))
    else:
        name = f"greedy-{facts['target']}-{len(prompts)}x{args.max_new_tokens}.json"
        cache = str(DATA / name)
        outputs = greedy_outputs(model, prompts, args.max_new_tokens, stops, cache)
    if args.replay_budget:
        head = [(s, v, "float32") for s, v, flag in extra if flag == "--fp32-head"]
        facts["replay"] = replays(model, [(s, "", None) for s in specs] + head, prompts, outputs, args.replay_budget,
                                  tok)
        facts["replay_budget"] = args.replay_budget
        for spec, r in facts["replay"].items():
            print(f"replay@{args.replay_budget} {spec}: {r['tok_per_step']['overall']} tok/step, "
                  f"{r['propose_ms']} ms/propose, P(acc>=d) {r['depth_acceptance'][:8]}")
    facts["load_end"] = round(os.getloadavg()[0], 2)
    facts["seconds"] = round(time.time() - started, 1)
    save_json(args.json, facts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
