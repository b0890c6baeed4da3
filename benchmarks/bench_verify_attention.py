"""Verify-step cost of SmolLM2 with the tree-attention op vs the SDPA 4-D mask path, same run.

``HFTarget(model, attention="tree_op")`` routes each layer's attention through
``torch.ops.specdec.tree_attention``; ``"mask"`` (the default) through transformers' SDPA with a
4-D additive mask. Both cost curves (verify of 0..64 drafted nodes over a ``--prefix``-token
prefix, ``VerifyCostModel.calibrate``) are measured alternately ``--repeats`` times; the table
gives the best time per size and the ratio mask / tree_op (> 1: the op is faster).

    python benchmarks/bench_verify_attention.py [--prefix 512] [--repeats 2] [--modes mask,tree_op]
"""

from __future__ import annotations

import argparse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--modes", default="mask,tree_op", help="HFTarget attention modes to time (first = baseline)")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]

    from specdec.engine.sizing import VerifyCostModel
    from specdec.models import load_default
    from specdec.verify.hf import HFTarget

    model, _ = load_default()
    best: dict[str, list[float]] = {}
    sizes: list[int] = []
    for _ in range(args.repeats):  # alternating, so load drift hits both paths alike
        for mode in modes:
            curve = VerifyCostModel.calibrate(HFTarget(model, attention=mode), prefix_len=args.prefix)
            sizes = list(curve.sizes)
            old = best.get(mode, [float("inf")] * len(sizes))
            best[mode] = [min(a, b) for a, b in zip(old, curve.seconds)]
    print(f"verify ms over a {args.prefix}-token prefix, best of {args.repeats}")
    ratios = [f"{modes[0]} / {m}" for m in modes[1:]]
    print("| drafted nodes | " + " | ".join(f"{m} (ms)" for m in modes) + "".join(f" | {r}" for r in ratios) + " |")
    print("|---:|" + "---:|" * (2 * len(modes) - 1))
    for i, n in enumerate(sizes):
        ms = [best[m][i] * 1e3 for m in modes]
        print(f"| {n} | " + " | ".join(f"{v:.1f}" for v in ms) + "".join(f" | {ms[0] / v:.2f}" for v in ms[1:]) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
