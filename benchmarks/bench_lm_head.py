"""LM-head cost on CPU by row count: ``F.linear`` vs the transposed product ``W @ h^T``, same run.

Why: verification feeds 2-17 rows through a 49,152 x 576 LM head; how that product is issued
decides whether the first drafted token costs +15% or +70% of a decode step.

    python benchmarks/bench_lm_head.py [--threads 2] [--vocab 49152] [--hidden 576]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F


def best_ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--hidden", type=int, default=576)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(args.vocab, args.hidden, generator=gen)
    print(f"LM head {args.vocab} x {args.hidden} fp32, {args.threads} threads, best of 20 (ms)")
    print(f"{'rows':>5} {'F.linear':>9} {'W @ h^T':>9} {'ratio':>6}")
    for rows in (1, 2, 4, 8, 9, 17, 33):
        h = torch.randn(rows, args.hidden, generator=gen)
        lin = best_ms(lambda: F.linear(h, w))
        tr = best_ms(lambda: (w @ h.T).T)
        print(f"{rows:>5} {lin:>9.2f} {tr:>9.2f} {lin / tr:>6.2f}")


if __name__ == "__main__":
    main()
