"""KV append in place vs transformers' ``torch.cat``, same run: decoding time per step by context length.

Why: every decoding step appends its new K/V rows to every layer's cache. transformers'
``DynamicLayer`` does it with ``torch.cat``, which copies all ``S`` rows of every layer into a fresh
allocation each step (for SmolLM2: 30 layers x 2 tensors x 768 bytes per row); past malloc's mmap
threshold each of those allocations is new pages for the kernel to fault in. specdec's cache
(:mod:`specdec.verify.cache`) writes the new rows into buffers with spare rows instead.

Both caches run the same target, decoder and prompts, interleaved (A B A B per prompt length),
fastest of ``--repeats``, the prompt's prefill not counted; the baseline is specdec's own ragged
cache with transformers' appending layer (the cache before 2026-12-03). Prompts are the first ``L``
tokens of the dev prompts' texts run together, so every length is real text. Each row decodes
``--new-tokens`` greedy tokens with plain decoding and with the suffix proposer, and checks that
both caches emit the same tokens.

    python -m benchmarks.kernels.kv_append [--lengths 128 512 1024 2048] [--new-tokens 64] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from benchmarks.common.paths import DEV_PROMPTS
from specdec import SpeculativeDecoder, SuffixProposer
from specdec.models import load_default
from specdec.prompts import read_prompt_records
from specdec.verify import cache as kv
from specdec.verify.hf import HFTarget


class CatAppendTarget(HFTarget):
    """The same target whose cache layers append with ``torch.cat`` (transformers' ``DynamicLayer``)."""

    def new_cache(self):
        from transformers.cache_utils import DynamicLayer

        cache = kv.new_cache()
        cache.layer_class_to_replicate = DynamicLayer
        return cache


def long_prompt(tokenizer, path: str, length: int) -> list[int]:
    """The first ``length`` tokens of the prompts' first turns, joined by blank lines."""
    text = "\n\n".join(r["turns"][0] for r in read_prompt_records(path))
    ids = tokenizer(text)["input_ids"]
    if len(ids) < length:
        raise SystemExit(f"the prompts hold {len(ids)} tokens, fewer than --lengths {length}")
    return ids[:length]


def decode_ms_per_step(decoder, ids, n) -> tuple[float, list[int]]:
    """Milliseconds per decoding step (the wall time less the prompt's prefill) and the tokens."""
    t0 = time.perf_counter()
    out = decoder.generate(ids, n, stop_tokens=[])
    wall = time.perf_counter() - t0
    return (wall - out.metrics.prefill_s) / max(out.metrics.steps, 1) * 1e3, out.tokens


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024, 2048])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", default=str(DEV_PROMPTS))
    args = ap.parse_args(argv)
    if min(args.lengths) < 1 or args.new_tokens < 1 or args.repeats < 1 or args.threads < 1:
        ap.error("--lengths, --new-tokens, --repeats and --threads must be >= 1")
    try:  # a missing or malformed file fails before the model loads
        read_prompt_records(args.prompts, limit=1)
    except ValueError as exc:
        ap.error(f"--prompts: {exc}")
    torch.set_num_threads(args.threads)
    model, tok = load_default()
    prompts = {n: long_prompt(tok, args.prompts, n) for n in args.lengths}
    targets = {"in place": HFTarget(model), "torch.cat": CatAppendTarget(model)}
    load = os.getloadavg()
    print(f"SmolLM2-135M, {args.threads} threads, {args.new_tokens} new tokens, fastest of {args.repeats}; "
          f"load average {load[0]:.2f}")
    print("| prompt tokens | method | in place ms/step | torch.cat ms/step | ratio | same tokens |")
    print("|---:|---|---:|---:|---:|---|")
    for method in ("plain", "suffix"):
        decoders = {}
        for name, target in targets.items():
            decoders[name] = SpeculativeDecoder(target, SuffixProposer(model.config.vocab_size)
                                                if method == "suffix" else None)
            decoders[name].generate(prompts[min(prompts)], 4, stop_tokens=[])  # warm: cost model, first forwards
        for n, ids in prompts.items():
            best, tokens = dict.fromkeys(targets, float("inf")), {}
            for _ in range(args.repeats):
                for name, dec in decoders.items():
                    ms, tokens[name] = decode_ms_per_step(dec, ids, args.new_tokens)
                    best[name] = min(best[name], ms)
            a, b = best["in place"], best["torch.cat"]
            same = tokens["in place"] == tokens["torch.cat"]
            print(f"| {n} | {method} | {a:.1f} | {b:.1f} | {b / a:.2f}x | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
