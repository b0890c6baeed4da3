"""Skinny linear vs ``F.linear`` on CPU, same run: per product set and per verify step.

Why: a verify step pushes ``1 + tree size`` rows through every linear layer and the LM head; on a
CPU the weights stream from DRAM, so the step should cost what a one-row step costs. Two parts:

* ``layers``: all linear products of one forward of a Llama-shaped model (default: SmolLM2-135M's
  shapes, 30 layers + the 49,152 x 576 LM head, 540 MB of float32 weights, so they stream from
  DRAM as in a real forward), by row count, ``F.linear`` vs :func:`specdec.ops.skinny_linear`.
* ``--model default``: the real target's verify step (:class:`~specdec.verify.hf.HFTarget`) by
  chain length, with ``skinny_linear=False`` vs ``True``, interleaved, fastest of ``--repeats``.

    python benchmarks/bench_skinny_linear.py [--threads 2] [--rows 1 2 4 8 16 32 64] [--model default]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from specdec.ops.skinny_linear import skinny_linear


def layer_shapes(hidden: int, intermediate: int, kv: int, layers: int, vocab: int) -> list[tuple[int, int]]:
    """``(out, in)`` of every linear product of one forward (q, k, v, o, gate, up, down per layer)."""
    per_layer = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden),
                 (intermediate, hidden), (intermediate, hidden), (hidden, intermediate)]
    return per_layer * layers + [(vocab, hidden)]


def time_products(fn, weights, inputs, repeats: int) -> float:
    """Fastest of ``repeats`` passes over all weights, in ms (one warm-up pass first)."""
    best = float("inf")
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        for w in weights:
            fn(inputs[w.shape[1]], w)
        if r:
            best = min(best, time.perf_counter() - t0)
    return best * 1e3


def bench_layers(args) -> None:
    gen = torch.Generator().manual_seed(0)
    shapes = layer_shapes(args.hidden, args.intermediate, args.kv, args.layers, args.vocab)
    weights = [torch.randn(o, i, generator=gen) / i ** 0.5 for o, i in shapes]
    mb = sum(w.numel() for w in weights) * 4 / 2**20
    print(f"one forward's linear products: {len(weights)} weights, {mb:.0f} MB fp32, {args.threads} threads, "
          f"fastest of {args.repeats} (ms)")
    print(f"{'rows':>5} {'F.linear':>9} {'skinny':>8} {'ratio':>6}  {'skinny GB/s':>11}")
    for rows in args.rows:
        inputs = {k: torch.randn(rows, k, generator=gen) for k in {i for _, i in shapes}}
        a = time_products(lambda x, w: F.linear(x, w), weights, inputs, args.repeats)
        b = time_products(lambda x, w: skinny_linear(x, w, impl="op"), weights, inputs, args.repeats)
        print(f"{rows:>5} {a:>9.2f} {b:>8.2f} {a / b:>6.2f}  {mb * 2**20 / (b / 1e3) / 1e9:>11.1f}")


def bench_verify(args) -> None:
    from specdec.engine.sizing import VerifyCostModel
    from specdec.models import load_default
    from specdec.verify.hf import HFTarget

    model, _ = load_default()
    targets = {"F.linear": HFTarget(model, skinny_linear=False), "skinny": HFTarget(model, skinny_linear=True)}
    best = {name: [float("inf")] * len(args.sizes) for name in targets}
    for _ in range(args.repeats):  # interleaved, so load bursts hit both alike
        for name, target in targets.items():
            cm = VerifyCostModel.calibrate(target, prefix_len=args.prefix, sizes=args.sizes, repeats=1)
            best[name] = [min(a, b) for a, b in zip(best[name], cm.seconds)]
    print(
        f"\nSmolLM2-135M verify step, prefix {args.prefix}, chain of n drafted tokens (ms, fastest of {args.repeats})"
    )
    print(f"{'n':>4} {'F.linear':>9} {'skinny':>8} {'ratio':>6} {'skinny vs n=0':>14}")
    for i, n in enumerate(args.sizes):
        a, b = best["F.linear"][i] * 1e3, best["skinny"][i] * 1e3
        print(f"{n:>4} {a:>9.1f} {b:>8.1f} {a / b:>6.2f} {b / (best['skinny'][0] * 1e3):>14.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 64])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--kv", type=int, default=192, help="K/V projection width (kv heads x head dim)")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--model", choices=["default"], help="also time the real target's verify step")
    ap.add_argument("--sizes", type=int, nargs="+", default=[0, 1, 2, 4, 8, 16, 32])
    ap.add_argument("--prefix", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    bench_layers(args)
    if args.model:
        bench_verify(args)


if __name__ == "__main__":
    main()
