"""Verify-step cost of SmolLM2 with the tree-attention op vs the SDPA 4-D mask path, same run.

``HFTarget(model, attention="tree_op")`` routes each layer's attention through
``torch.ops.specdec.tree_attention``; ``"mask"`` (the default) through transformers' SDPA with a
4-D additive mask. Both cost curves (verify of 0..64 drafted nodes over a ``--prefix``-token
prefix, ``VerifyCostModel.calibrate``) are measured alternately ``--repeats`` times; the table
gives the best time per size and the ratio mask / tree_op (> 1: the op is faster).

``--ragged 512,448`` times a ragged batch instead: one request per length, so the shorter ones have
holes in the shared cache, each verifying a chain of n nodes (the mask path needs its dense 4-D
mask there; the op reads each request's prefix length).

    python benchmarks/bench_verify_attention.py [--prefix 512] [--repeats 2] [--modes mask,tree_op] [--ragged L1,L2,..]
"""

from __future__ import annotations

import argparse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--modes", default="mask,tree_op", help="HFTarget attention modes to time (first = baseline)")
    ap.add_argument("--ragged", default=None, help="comma-separated prompt lengths: time a ragged batch instead")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.ragged.split(",")] if args.ragged else None
    modes = [m for m in args.modes.split(",") if m]

    from specdec.control.sizer import VerifyCostModel
    from specdec.models import load_default
    from specdec.verify.hf import HFTarget

    model, _ = load_default()
    best: dict[str, list[float]] = {}
    sizes: list[int] = []
    for _ in range(args.repeats):  # alternating, so load drift hits both paths alike
        for mode in modes:
            target = HFTarget(model, attention=mode)
            if lengths:
                sizes, seconds = ragged_curve(target, lengths)
            else:
                curve = VerifyCostModel.calibrate(target, prefix_len=args.prefix)
                sizes, seconds = list(curve.sizes), curve.seconds
            old = best.get(mode, [float("inf")] * len(sizes))
            best[mode] = [min(a, b) for a, b in zip(old, seconds)]
    where = f"a ragged batch of prompts {lengths}" if lengths else f"a {args.prefix}-token prefix"
    print(f"verify ms over {where}, best of {args.repeats}")
    ratios = [f"{modes[0]} / {m}" for m in modes[1:]]
    print("| drafted nodes | " + " | ".join(f"{m} (ms)" for m in modes) + "".join(f" | {r}" for r in ratios) + " |")
    print("|---:|" + "---:|" * (2 * len(modes) - 1))
    for i, n in enumerate(sizes):
        ms = [best[m][i] * 1e3 for m in modes]
        print(f"| {n} | " + " | ".join(f"{v:.1f}" for v in ms) + "".join(f" | {ms[0] / v:.2f}" for v in ms[1:]) + " |")
    return 0


def ragged_curve(target, lengths, repeats: int = 2):
    """Fastest verify time per chain size for a batch of prompts of ``lengths`` (holes in the cache
    for all but the longest), each request verifying one chain of that size."""
    import time

    import torch

    from specdec import DraftTree
    from specdec.estimate.verify_cost import CALIBRATION_SIZES

    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, target.vocab_size, (n,), generator=gen).tolist() for n in lengths]
    state, _, _ = target.prefill(prompts)
    target.set_pending(state, [p[-1] for p in prompts])
    sizes = list(CALIBRATION_SIZES)
    times = [float("inf")] * len(sizes)
    for sweep in range(repeats + 1):  # the first sweep warms every shape
        for i, n in enumerate(sizes):
            trees = [DraftTree.chain(torch.randint(0, target.vocab_size, (n,), generator=gen)) for _ in prompts]
            t0 = time.perf_counter()
            target.verify(state, trees)
            elapsed = time.perf_counter() - t0
            target.discard(state)
            if sweep:
                times[i] = min(times[i], elapsed)
    return sizes, times


if __name__ == "__main__":
    raise SystemExit(main())
