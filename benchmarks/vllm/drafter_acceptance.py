"""What each drafter accepts inside vLLM on a pool's own prompts: one engine per configuration, in process.

A plan reads a candidate's acceptance from vLLM's counters over a short ramp on a fresh server, so a
drafter that learns while it serves (the cost gate) is read partly cold, and one that caches earlier
responses (``suffix``'s global cache) partly warm. This runs a pool's measured prompts (chat-templated
as the server does; ``--pools``/``--pool`` as ``specdec plan``) greedily through an in-process
``vllm.LLM`` per configuration: one request at a time (one row a step) or all at once
(``--together``), after a first pass over the same prompts with ``--warm`` (a warm drafter; note that a
global response cache then holds every answer). Per configuration: decode row-steps, drafting
row-steps, drafted and accepted tokens (vLLM's ``spec_decode`` counters), accepted per row-step,
output tokens/s of the measured pass, and whether the outputs equal the first configuration's.
``--rows-out FILE`` writes each prompt's ids and the first configuration's output ids as the JSONL
``chain_replay.py --data`` replays, so the same answers can be drafted offline.

Configurations: ``off``, ``specdec`` (the suffix drafter, no gate), ``specdec-gate`` (with its cost
gate), ``suffix``, ``ngram`` (vLLM's own), each at ``--k``.

    .venv-vllm/bin/python -m benchmarks.vllm.drafter_acceptance --pools inter.toml --pool interactive \\
        --configs specdec,specdec-gate,suffix [--together] [--warm]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

DRAFTER = "specdec.integrations.vllm.drafter.SuffixDrafter"
CONFIGS = ("off", "specdec", "specdec-gate", "suffix", "ngram")
COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")


def speculative_config(name: str, k: int) -> tuple[dict | None, dict]:
    """``(speculative_config, specdec drafter options)`` of a configuration name."""
    if name == "off":
        return None, {}
    if name in ("specdec", "specdec-gate"):
        return {"method": "custom_class", "model": DRAFTER, "num_speculative_tokens": k}, \
            {"log_every": 0, "cost_gate": name == "specdec-gate"}
    if name == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 1}, {}
    return {"method": "suffix", "num_speculative_tokens": k}, {}


def counters(llm) -> list[float]:
    """vLLM's :data:`COUNTERS` (summed over their samples; 0 when absent, as without speculation)."""
    got = dict.fromkeys(COUNTERS, 0.0)
    for m in llm.get_metrics():
        if m.name in got:
            got[m.name] += float(m.value)
    return list(got.values())


def generate(llm, inputs: list[dict], params, together: bool) -> list:
    """vLLM's outputs for ``inputs``: in one call, or one request at a time."""
    if together:
        return llm.generate(inputs, params, use_tqdm=False)
    return [llm.generate([x], params, use_tqdm=False)[0] for x in inputs]


def serve(model: str, name: str, prompts: list[list[int]], sampling: dict, *, k: int, together: bool, warm: bool,
          max_model_len: int) -> dict:
    """One configuration's measured pass (module docstring); ``sampling``: the pool's request fields."""
    from vllm import LLM, SamplingParams

    from specdec.conformance.audit.adapters.vllm_worker import without_llvmlite

    spec, options = speculative_config(name, k)
    os.environ["SPECDEC_VLLM_OPTIONS"] = json.dumps(options)
    with without_llvmlite():
        llm = LLM(model=model, skip_tokenizer_init=True, speculative_config=spec, max_model_len=max_model_len,
                  max_num_seqs=16, max_num_batched_tokens=2048, enforce_eager=True, dtype="float32",
                  kv_cache_memory_bytes=1 << 30, disable_log_stats=False, seed=0)
    params = SamplingParams(**sampling, detokenize=False)
    inputs = [{"prompt_token_ids": p} for p in prompts]
    try:
        if warm:
            generate(llm, inputs, params, together)
        before = counters(llm)
        start = time.perf_counter()
        done = generate(llm, inputs, params, together)
        wall = time.perf_counter() - start
        drafts, drafted, accepted = (b - a for a, b in zip(before, counters(llm)))
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    outputs = [list(o.outputs[0].token_ids) for o in done]
    tokens = sum(len(o) for o in outputs)
    row_steps = tokens - accepted - len(outputs)  # each row-step emits one token plus those it accepted
    return {"config": name, "outputs": outputs, "tokens": tokens, "row_steps": row_steps, "drafts": drafts,
            "drafted": drafted, "accepted": accepted, "tok_s": tokens / wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", required=True, help="a pool file, as specdec plan --engine vllm reads it")
    ap.add_argument("--pool", required=True)
    ap.add_argument("--configs", default="specdec,specdec-gate,suffix")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--together", action="store_true", help="all prompts at once (else one at a time)")
    ap.add_argument("--warm", action="store_true", help="a first pass over the same prompts before measuring")
    ap.add_argument("--model", default=None, help="a vLLM-loadable folder (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--rows-out", default=None, help="write prompt and output ids for chain_replay.py --data")
    args = ap.parse_args(argv)
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown or not names:
        ap.error(f"--configs takes {', '.join(CONFIGS)}; got {args.configs!r}")
    if args.k < 1:
        ap.error(f"--k must be >= 1, got {args.k}")
    from specdec.plan.vllm.pool_spec import load_pool_file

    pools = load_pool_file(args.pools)
    if args.pool not in pools:
        ap.error(f"pool {args.pool!r} is not in {args.pools} (it has {', '.join(pools)})")
    pool = pools[args.pool]
    from transformers import AutoTokenizer

    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir, load_default
    from specdec.prompts import encode_first_turn

    if args.model is None:
        if not (cache_dir() / DEFAULT_NAME / "model.safetensors").exists():
            load_default()
        args.model = str(vllm_ready(cache_dir() / DEFAULT_NAME))
    tok = AutoTokenizer.from_pretrained(args.model)
    prompts = [encode_first_turn(tok, r) for r in pool.prompts]
    sampling = pool.sampling.body()
    rows = [serve(args.model, n, prompts, sampling, k=args.k, together=args.together, warm=args.warm,
                  max_model_len=args.max_model_len) for n in names]
    first = rows[0]["outputs"]
    print(f"pool {args.pool}: {len(prompts)} prompts, sampling {sampling}, k {args.k}, "
          f"{'all at once' if args.together else 'one at a time'}{', warm' if args.warm else ', cold'}")
    print("| configuration | row-steps | drafting row-steps | drafted | accepted | accepted / row-step | tok/s | "
          f"outputs equal {names[0]}'s |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        same = sum(a == b for a, b in zip(r["outputs"], first))
        per_step = r["accepted"] / r["row_steps"]
        print(f"| {r['config']} | {r['row_steps']:.0f} | {r['drafts']:.0f} | {r['drafted']:.0f} | "
              f"{r['accepted']:.0f} | {per_step:.3f} | {r['tok_s']:.1f} | {same} of {len(first)} |")
    if args.rows_out:
        with open(args.rows_out, "w") as f:
            for rec, p, out in zip(pool.prompts, prompts, first):
                f.write(json.dumps({"category": rec["category"], "prompt_ids": p, "output_ids": out}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
