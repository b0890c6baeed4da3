"""Times the CUDA tree-attention kernel against SDPA (dense boolean mask) and flex_attention (block
mask) at decode-shaped sizes on one GPU, and reports achieved HBM bandwidth.

Shapes: 32 query heads / 8 KV heads, head dim 128, bf16, random trees (random parents, like real
drafts), batch 1-64, prefix 512-32k, tree 16-128. Bytes counted = the fewest the op must move: each
request's K and V rows [0, P + N) once, q once, out once, the packed mask once. SDPA gets the GQA
heads pre-expanded (the expansion is not timed, which favours it); flex_attention gets
``enable_gqa=True`` and a block mask built from the same tree bits. Times are medians of CUDA-event
timings after warm-up. Run by benchmarks/gpu/run_tree_attention.sh; prints a Markdown table last.

Usage: python benchmarks/gpu/bench_tree_attention_gpu.py [--out results.json] [--quick]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]  # run from a checkout without installing
from tree_attention_cases import tree_masks  # noqa: E402

ta = importlib.import_module("specdec.ops.tree_attention")

HQ, HKV, D = 32, 8, 128
HBM_PEAK = 4.8e12
CONFIGS = [  # (batch, prefix, tree nodes)
    (1, 512, 16), (1, 4096, 64), (1, 32768, 16), (1, 32768, 128),
    (8, 4096, 16), (8, 4096, 64), (8, 32768, 64),
    (16, 8192, 128), (32, 32768, 16),
    (64, 512, 16), (64, 2048, 64), (64, 4096, 128),
]
QUICK = [(1, 4096, 64), (8, 32768, 64), (64, 2048, 64)]


def time_ms(fn, warmup=3, reps=15):
    """Median milliseconds of ``fn()`` by CUDA events (after warm-up)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth():
    """Device-to-device copy bandwidth (bytes read + written per second): the practical ceiling."""
    src = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src), warmup=2, reps=10)
    return 2 * src.numel() / (ms * 1e-3)


def make_inputs(batch, prefix, nodes, gen):
    seq = prefix + nodes
    q = torch.randn(batch, nodes, HQ, D, generator=gen).to("cuda", torch.bfloat16)
    k = torch.randn(batch, seq, HKV, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, seq, HKV, D, device="cuda", dtype=torch.bfloat16)
    mask = tree_masks([nodes] * batch, nodes, gen).cuda()
    prefix_lens = torch.full((batch,), prefix, dtype=torch.int32, device="cuda")
    return q, k, v, mask, prefix_lens


def min_bytes(batch, prefix, nodes):
    kv = 2 * batch * (prefix + nodes) * HKV * D * 2
    return kv + 2 * batch * nodes * HQ * D * 2 + batch * nodes * math.ceil(nodes / 64) * 8


def flex_runner():
    """Compiled flex_attention (dynamic shapes, so one compile serves every size) or None."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    return torch.compile(flex_attention, dynamic=True), create_block_mask


def bench_one(batch, prefix, nodes, flex, gen, budget):
    q, k, v, mask, prefix_lens = make_inputs(batch, prefix, nodes, gen)
    seq = k.shape[1]
    row = {"batch": batch, "prefix": prefix, "nodes": nodes}
    out = ta.tree_attention(q, k, v, mask, prefix_lens, impl="op", validate=True)
    ref = ta.tree_attention_reference(q[:1].float(), k[:1].float(), v[:1].float(), mask[:1], prefix_lens[:1])
    row["max_err_b0"] = (out[:1].float() - ref).abs().max().item()
    row["op_ms"] = time_ms(lambda: ta.tree_attention(q, k, v, mask, prefix_lens, impl="op", validate=False))
    row["raw_op_ms"] = time_ms(lambda: torch.ops.specdec.tree_attention(q, k, v, mask, prefix_lens, None))
    nbytes = min_bytes(batch, prefix, nodes)
    row["GBps"] = nbytes / (row["raw_op_ms"] * 1e-3) / 1e9
    row["hbm_frac"] = row["GBps"] * 1e9 / HBM_PEAK
    dense = ta.dense_mask(mask, prefix_lens, seq)[:, None]  # [B, 1, N, S]
    expanded_bytes = 2 * batch * seq * HQ * D * 2
    if expanded_bytes < 40e9:
        qt = q.transpose(1, 2)
        kt = k.transpose(1, 2).repeat_interleave(HQ // HKV, dim=1)
        vt = v.transpose(1, 2).repeat_interleave(HQ // HKV, dim=1)
        row["sdpa_ms"] = time_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=dense), reps=5)
        del kt, vt
    if flex is not None and time.monotonic() < budget:
        compiled, create_block_mask = flex
        bits = ta.unpack_bits(mask)[..., :nodes]  # [B, N, N]
        pl = prefix_lens.long()

        def mask_mod(b, h, qi, kv):
            j = (kv - pl[b]).clamp(0, nodes - 1)
            return (kv < pl[b]) | ((kv - pl[b] < nodes) & bits[b, qi, j])

        try:
            bm = create_block_mask(mask_mod, batch, None, nodes, seq, device="cuda")
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            run = lambda: compiled(qt, kt, vt, block_mask=bm, enable_gqa=True)  # noqa: E731
            got = run().transpose(1, 2)
            row["flex_err_vs_op"] = (got.float() - out.float()).abs().max().item()
            row["flex_ms"] = time_ms(run, reps=5)
        except Exception as exc:  # report and keep benchmarking the other columns
            row["flex_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    for base in ("sdpa", "flex"):
        if f"{base}_ms" in row:
            row[f"speedup_vs_{base}"] = row[f"{base}_ms"] / row["raw_op_ms"]
    return row


def table(rows, copy_bw):
    lines = [
        f"device-to-device copy: {copy_bw / 1e12:.2f} TB/s (read+write); HBM datasheet 4.8 TB/s",
        "",
        "| batch | prefix | tree | op ms | GB/s | % of 4.8 TB/s | SDPA dense ms | x vs SDPA | flex ms | x vs flex | "
        "max err |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cell = lambda key, fmt: format(r[key], fmt) if key in r else "-"  # noqa: E731
        lines.append(
            f"| {r['batch']} | {r['prefix']} | {r['nodes']} | {r['raw_op_ms']:.4f} | {r['GBps']:.0f} | "
            f"{100 * r['hbm_frac']:.0f}% | {cell('sdpa_ms', '.4f')} | {cell('speedup_vs_sdpa', '.1f')} | "
            f"{cell('flex_ms', '.4f')} | {cell('speedup_vs_flex', '.1f')} | {r['max_err_b0']:.2g} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--flex-seconds", type=float, default=150.0, help="stop trying flex after this long")
    args = parser.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    copy_bw = copy_bandwidth()
    flex = flex_runner()
    budget = time.monotonic() + args.flex_seconds
    rows = []
    for cfg in QUICK if args.quick else CONFIGS:
        row = bench_one(*cfg, flex, gen, budget)
        print(json.dumps(row), flush=True)
        rows.append(row)
        torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps({"copy_bw": copy_bw, "rows": rows, "torch": torch.__version__}, indent=1))
    print(table(rows, copy_bw))


if __name__ == "__main__":
    main()
