"""GPU agenda step 3: the tree-attention verify op on decode-tree shapes against SDPA with a dense
mask, flex_attention with a block mask, and the HBM roofline; a profile of the worst case.

Shapes: 8B-class heads (32 query heads, 8 KV heads, head dim 128), bf16, random trees (random
parents, as real drafts), trees of 8-128 nodes, batch 1-64, prefixes 512-32k; the corners of that
cube first, so a time cap keeps the extremes. Per row:

* **op ms**: median CUDA-event time of ``torch.ops.specdec.tree_attention`` (no Python checks);
* **bytes / flops**: the fewest bytes the op must move (each request's K and V rows ``[0, P + N)``
  once, q and out once, the packed mask once) and its useful flops (``4 B N Hq D (P + N)``);
* **roofline**: ``max(bytes / copy bandwidth, flops / matrix rate)``, both ceilings measured in the
  same run (a large device copy, read + write; a large bf16 matrix product on random data);
  ``% roofline`` = roofline time / op time; ``% HBM`` = achieved bytes/s over the datasheet's
  4.8 TB/s (the issue's goal: >= 70% where the op is memory-bound);
* **SDPA dense**: ``scaled_dot_product_attention`` with a ``[B, 1, N, S]`` boolean mask on K/V
  pre-expanded to 32 heads (expansion not timed, which favours it; skipped above 40 GB);
* **flex**: ``torch.compile(flex_attention, dynamic=True)`` with a block mask from the same tree bits
  and ``enable_gqa=True`` (compiles are slow: tried until ``--flex-seconds``).

The worst row (lowest % roofline) is profiled with ``torch.profiler`` (op, SDPA and flex; kernel
table to ``--profile``) and written to ``--worst`` for an ``ncu`` run (``--only B,P,N``).
``--device cpu --smoke`` runs the same code at toy sizes (the smoke run of scripts/gpu/run.sh).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec.tree import DraftTree, pack_trees  # noqa: E402

ta = importlib.import_module("specdec.ops.tree_attention")  # the module (the package re-exports the function)

HBM_PEAK = 4.8e12
GPU = {"heads": (32, 8, 128), "dtype": torch.bfloat16, "nodes": (8, 32, 128), "batch": (1, 8, 64),
       "prefix": (512, 4096, 32768)}
SMOKE = {"heads": (4, 2, 64), "dtype": torch.float32, "nodes": (8, 16), "batch": (2,), "prefix": (64,)}


def shapes(cfg: dict) -> list[tuple[int, int, int]]:
    """(batch, prefix, nodes): the cube's corners first, then the rest."""
    grid = list(itertools.product(cfg["batch"], cfg["prefix"], cfg["nodes"]))
    corner = lambda s: sum(v in (c[0], c[-1]) for v, c in zip(s, (cfg["batch"], cfg["prefix"], cfg["nodes"])))  # noqa: E731
    return sorted(grid, key=lambda s: (-corner(s), s))


class Timer:
    def __init__(self, device: torch.device):
        self.device = device

    def ms(self, fn, warmup=3, reps=15) -> float:
        """Median milliseconds of ``fn()`` (CUDA events on a GPU, the host clock on a CPU)."""
        for _ in range(warmup):
            fn()
        times = []
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            for _ in range(reps):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        else:
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times)


def ceilings(timer: Timer, smoke: bool) -> dict:
    """Copy bandwidth (bytes read + written per second) and the matrix rate, measured here."""
    dev = timer.device
    n = (64 << 20) if smoke else (2 << 30)
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_()
    dst = torch.empty_like(src)
    copy_bw = 2 * n / (timer.ms(lambda: dst.copy_(src), warmup=2, reps=10) * 1e-3)
    m = 512 if smoke else 8192
    dtype = torch.float32 if smoke else torch.bfloat16
    a, b = torch.randn(m, m, device=dev, dtype=dtype), torch.randn(m, m, device=dev, dtype=dtype)
    rate = 2 * m ** 3 / (timer.ms(lambda: a @ b, warmup=2, reps=10) * 1e-3)
    return {"copy_bytes_per_s": copy_bw, "matmul_flops_per_s": rate, "matmul_dtype": str(dtype), "matmul_n": m}


def tree_mask(batch: int, nodes: int, gen: torch.Generator) -> torch.Tensor:
    """``int64 [B, N, W]`` ancestor bits of random trees (each node's parent uniform among the
    earlier nodes and the root), built by the library's own :class:`DraftTree`."""
    trees = []
    for _ in range(batch):
        parents = [int(torch.randint(-1, i, (1,), generator=gen)) if i else -1 for i in range(nodes)]
        trees.append(DraftTree(torch.zeros(nodes, dtype=torch.long), torch.tensor(parents, dtype=torch.int32)))
    return pack_trees(trees).ancestor_mask


def counts(batch, prefix, nodes, hq, hkv, d, elem):
    kv = 2 * batch * (prefix + nodes) * hkv * d * elem
    nbytes = kv + 2 * batch * nodes * hq * d * elem + batch * nodes * math.ceil(nodes / 64) * 8
    return nbytes, 4 * batch * nodes * hq * d * (prefix + nodes)


def flex_runner(device: torch.device):
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    fn = torch.compile(flex_attention, dynamic=True) if device.type == "cuda" else flex_attention
    return fn, create_block_mask


def inputs(batch, prefix, nodes, cfg, device, gen):
    hq, hkv, d = cfg["heads"]
    seq = prefix + nodes
    q = torch.randn(batch, nodes, hq, d, generator=gen).to(device, cfg["dtype"])
    k = torch.randn(batch, seq, hkv, d, device=device, dtype=cfg["dtype"])
    v = torch.randn(batch, seq, hkv, d, device=device, dtype=cfg["dtype"])
    mask = tree_mask(batch, nodes, gen).to(device)
    prefix_lens = torch.full((batch,), prefix, dtype=torch.int32, device=device)
    return q, k, v, mask, prefix_lens


def runners(q, k, v, mask, prefix_lens, cfg, flex, device):
    """``{"op": fn, "sdpa": fn?, "flex": fn?}`` plus a note on whatever could not be built."""
    hq, hkv, d = cfg["heads"]
    batch, nodes, seq = q.shape[0], q.shape[1], k.shape[1]
    out = {"op": lambda: torch.ops.specdec.tree_attention(q, k, v, mask, prefix_lens, None)}
    notes = {}
    if 2 * batch * seq * hq * d * q.element_size() < 40e9:
        dense = ta.dense_mask(mask, prefix_lens, seq)[:, None]
        qt = q.transpose(1, 2)
        kt = k.transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
        vt = v.transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
        out["sdpa"] = lambda: F.scaled_dot_product_attention(qt, kt, vt, attn_mask=dense)
    else:
        notes["sdpa"] = "skipped: expanded K/V over 40 GB"
    if flex is not None:
        fn, create_block_mask = flex
        bits = ta.unpack_bits(mask)[..., :nodes]
        pl = prefix_lens.long()

        def mask_mod(b, h, qi, kv):
            j = (kv - pl[b]).clamp(0, nodes - 1)
            return (kv < pl[b]) | ((kv - pl[b] < nodes) & bits[b, qi, j])

        try:
            bm = create_block_mask(mask_mod, batch, None, nodes, seq, device=str(device))
            fq, fk, fv = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            out["flex"] = lambda: fn(fq, fk, fv, block_mask=bm, enable_gqa=True)
        except Exception as exc:  # report, keep the other columns
            notes["flex"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out, notes


def bench_one(shape, cfg, ceil, flex, timer, gen, flex_deadline):
    batch, prefix, nodes = shape
    hq, hkv, d = cfg["heads"]
    q, k, v, mask, prefix_lens = inputs(batch, prefix, nodes, cfg, timer.device, gen)
    row = {"batch": batch, "prefix": prefix, "nodes": nodes}
    out = ta.tree_attention(q, k, v, mask, prefix_lens, impl="op", validate=True)
    ref = ta.tree_attention_reference(q[:1].float(), k[:1].float(), v[:1].float(), mask[:1], prefix_lens[:1])
    row["max_err_b0"] = (out[:1].float() - ref).abs().max().item()
    use_flex = flex if time.monotonic() < flex_deadline else None
    fns, notes = runners(q, k, v, mask, prefix_lens, cfg, use_flex, timer.device)
    row.update({f"{k}_note": v for k, v in notes.items()})
    if use_flex is None and flex is not None:
        row["flex_note"] = "skipped: past --flex-seconds"
    for name, fn in fns.items():
        try:
            if name == "flex":
                row["flex_err_vs_op"] = (fn().transpose(1, 2).float() - out.float()).abs().max().item()
            row[f"{name}_ms"] = timer.ms(fn, reps=15 if name == "op" else 5)
        except Exception as exc:
            row[f"{name}_note"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    nbytes, flops = counts(batch, prefix, nodes, hq, hkv, d, q.element_size())
    op_s = row["op_ms"] * 1e-3
    roof = max(nbytes / ceil["copy_bytes_per_s"], flops / ceil["matmul_flops_per_s"])
    row.update({"bytes": nbytes, "flops": flops, "flop_per_byte": round(flops / nbytes, 2),
                "bound": "memory" if nbytes / ceil["copy_bytes_per_s"] >= flops / ceil["matmul_flops_per_s"]
                else "matrix", "GBps": nbytes / op_s / 1e9, "hbm_frac": nbytes / op_s / HBM_PEAK,
                "copy_frac": nbytes / op_s / ceil["copy_bytes_per_s"], "tflops": flops / op_s / 1e12,
                "roofline_ms": roof * 1e3, "roofline_frac": roof / op_s})
    for base in ("sdpa", "flex"):
        if f"{base}_ms" in row:
            row[f"x_vs_{base}"] = row[f"{base}_ms"] / row["op_ms"]
    return row


def profile(shape, cfg, flex, timer, gen, path: Path):
    """Kernel-level table of op, SDPA and flex on one shape (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile as tprofile

    q, k, v, mask, prefix_lens = inputs(*shape, cfg, timer.device, gen)
    fns, _ = runners(q, k, v, mask, prefix_lens, cfg, flex, timer.device)
    for fn in fns.values():
        fn()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if timer.device.type == "cuda" else [])
    with tprofile(activities=acts) as prof:
        for fn in fns.values():
            for _ in range(5):
                fn()
        if timer.device.type == "cuda":
            torch.cuda.synchronize()
    key = "cuda_time_total" if timer.device.type == "cuda" else "cpu_time_total"
    path.write_text(f"worst case batch={shape[0]} prefix={shape[1]} nodes={shape[2]}: {list(fns)} x5 each\n\n" +
                    prof.key_averages().table(sort_by=key, row_limit=30))


def table(rows, ceil) -> str:
    lines = [f"copy {ceil['copy_bytes_per_s'] / 1e12:.2f} TB/s (read+write), matrix "
             f"{ceil['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s ({ceil['matmul_dtype']}); HBM datasheet 4.8 TB/s", "",
             "| batch | prefix | tree | op ms | bound | % roofline | % HBM | TFLOP/s | SDPA ms | x SDPA | flex ms | "
             "x flex | max err |", "|" + "---:|" * 13]
    cell = lambda r, k, f: format(r[k], f) if k in r else "-"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['batch']} | {r['prefix']} | {r['nodes']} | {r['op_ms']:.4f} | {r['bound']} | "
                     f"{100 * r['roofline_frac']:.0f}% | {100 * r['hbm_frac']:.0f}% | {r['tflops']:.0f} | "
                     f"{cell(r, 'sdpa_ms', '.4f')} | {cell(r, 'x_vs_sdpa', '.2f')} | {cell(r, 'flex_ms', '.4f')} | "
                     f"{cell(r, 'x_vs_flex', '.2f')} | {r['max_err_b0']:.2g} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true", help="toy sizes (CPU smoke run)")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every row and the ceilings")
    ap.add_argument("--seconds", type=float, default=1e9, help="start no new shape after this long")
    ap.add_argument("--flex-seconds", type=float, default=100.0, help="stop trying flex after this long")
    ap.add_argument("--profile", type=Path, default=None, help="kernel table of the worst row")
    ap.add_argument("--worst", type=Path, default=None, help="write the worst row's shape here (JSON)")
    ap.add_argument("--only", default=None, help="B,P,N: one shape")
    ap.add_argument("--kernel-only", action="store_true",
                    help="with --only: run the op three times and nothing else (what ncu should see)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no CUDA device")
    if args.kernel_only and args.only is None:
        ap.error("--kernel-only needs --only B,P,N")
    cfg = SMOKE if args.smoke else GPU
    todo = shapes(cfg) if args.only is None else [tuple(int(x) for x in args.only.split(","))]
    start = time.monotonic()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    if args.kernel_only:
        q, k, v, mask, prefix_lens = inputs(*todo[0], cfg, device, gen)
        for _ in range(3):
            torch.ops.specdec.tree_attention(q, k, v, mask, prefix_lens, None)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return 0
    timer = Timer(device)
    ceil = ceilings(timer, args.smoke)
    flex = flex_runner(device)
    rows, skipped = [], []
    for shape in todo:
        if time.monotonic() - start > args.seconds:
            skipped.append(shape)
            continue
        row = bench_one(shape, cfg, ceil, flex, timer, gen, start + args.flex_seconds)
        print(json.dumps(row), flush=True)
        rows.append(row)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if args.out:
            args.out.write_text(json.dumps({"ceilings": ceil, "rows": rows, "skipped": skipped,
                                            "torch": torch.__version__, "heads": cfg["heads"],
                                            "dtype": str(cfg["dtype"])}, indent=1))
    worst = min(rows, key=lambda r: r["roofline_frac"])
    summary = {"worst": {k: worst[k] for k in ("batch", "prefix", "nodes", "roofline_frac", "op_ms")},
               "best_hbm_frac": max(r["hbm_frac"] for r in rows),
               "min_x_vs_sdpa": min((r["x_vs_sdpa"] for r in rows if "x_vs_sdpa" in r), default=None),
               "rows_at_2x_sdpa": sum(r.get("x_vs_sdpa", 0) >= 2 for r in rows),
               "memory_bound_rows_at_70pct_hbm": sum(r["bound"] == "memory" and r["hbm_frac"] >= 0.7 for r in rows),
               "memory_bound_rows": sum(r["bound"] == "memory" for r in rows)}
    if args.out:
        args.out.write_text(json.dumps({"ceilings": ceil, "rows": rows, "skipped": skipped, "summary": summary,
                                        "torch": torch.__version__, "heads": cfg["heads"],
                                        "dtype": str(cfg["dtype"])}, indent=1))
    if args.worst:
        args.worst.write_text(json.dumps(summary["worst"]))
    if args.profile:
        profile((worst["batch"], worst["prefix"], worst["nodes"]), cfg, flex, timer, gen, args.profile)
    print(table(rows, ceil))
    if skipped:
        print(f"not run (past --seconds): {skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
