"""CPU tree attention: the C++ op vs the dense-mask plain-torch reference vs torch SDPA with a boolean
mask, on the same random inputs in the same run.

The reference builds the dense [B, N, S] mask, expands GQA heads and runs float32 matmuls + softmax
(that is its definition); SDPA gets the boolean mask pre-built and ``enable_gqa=True`` (mask building
not timed, which favours it). Times are medians of ``--reps`` calls after one warm-up. Shapes:
SmolLM2-135M's attention (9 query / 3 KV heads, d=64) and an 8B-class layer (32 / 8, d=128).

Usage: python -m benchmarks.kernels.tree_attention [--reps 7] [--dtype float32|bfloat16|both] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from tests.tree_attention_cases import make_case  # the tests' random trees, packed in the op's layout

ta = importlib.import_module("specdec.ops.tree_attention")  # the module: specdec.ops.tree_attention is the function

CONFIGS = [  # (label, batch, prefix, nodes, q_heads, kv_heads, head_dim)
    ("smollm2", 1, 512, 16, 9, 3, 64),
    ("smollm2", 1, 2048, 64, 9, 3, 64),
    ("smollm2", 4, 1024, 32, 9, 3, 64),
    ("8b-layer", 1, 4096, 16, 32, 8, 128),
    ("8b-layer", 1, 1024, 64, 32, 8, 128),
]


def median_ms(fn, reps):
    """(wall ms, process CPU ms) medians: on a shared machine the CPU time is the steadier number."""
    fn()
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return 1e3 * statistics.median(wall), 1e3 * statistics.median(cpu)


def bench(cfg, dtype, reps):
    label, b, p, n, hq, hkv, d = cfg
    q, k, v, mask, prefix = make_case(b, n, hq, hkv, d, [p] * b, dtype, extra_rows=0)
    dense = ta.dense_mask(mask, prefix, k.shape[1])[:, None]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    out = ta.tree_attention(q, k, v, mask, prefix, impl="op")
    sdpa_out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=dense, enable_gqa=True).transpose(1, 2)
    row = {"model": label, "batch": b, "prefix": p, "nodes": n, "dtype": str(dtype).removeprefix("torch.")}
    runs = {
        "op": lambda: torch.ops.specdec.tree_attention(q, k, v, mask, prefix, None),
        "reference": lambda: ta.tree_attention_reference(q, k, v, mask, prefix),
        "sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=dense, enable_gqa=True),
    }
    for name, fn in runs.items():
        row[f"{name}_ms"], row[f"{name}_cpu_ms"] = median_ms(fn, reps)
    row["max_diff_vs_sdpa"] = (out.float() - sdpa_out.float()).abs().max().item()
    for base in ("reference", "sdpa"):
        row[f"x_vs_{base}"] = row[f"{base}_ms"] / row["op_ms"]
        row[f"x_vs_{base}_cpu"] = row[f"{base}_cpu_ms"] / row["op_cpu_ms"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "both"], default="both")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not ta.op_available(torch.device("cpu")):
        raise SystemExit("specdec._C is not built: pip install --no-build-isolation -e .")
    dtypes = [torch.float32, torch.bfloat16] if args.dtype == "both" else [getattr(torch, args.dtype)]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("wall ms (CPU ms = process time, both threads) medians; x = speed-up of the op (wall / CPU time)")
    print("| model | B | prefix | tree | dtype | op | reference | SDPA+mask | x vs reference | x vs SDPA |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    rows = []
    for dtype in dtypes:
        for cfg in CONFIGS:
            r = bench(cfg, dtype, args.reps)
            rows.append(r)
            print(
                f"| {r['model']} | {r['batch']} | {r['prefix']} | {r['nodes']} | {r['dtype']} | "
                + " | ".join(f"{r[f'{x}_ms']:.1f} ({r[f'{x}_cpu_ms']:.1f})" for x in ("op", "reference", "sdpa"))
                + f" | {r['x_vs_reference']:.1f} ({r['x_vs_reference_cpu']:.1f}) | {r['x_vs_sdpa']:.1f} "
                  f"({r['x_vs_sdpa_cpu']:.1f}) |",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
