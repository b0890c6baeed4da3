"""A verify-cost curve for the replays' model-time estimates: given with ``--cost`` or measured on SmolLM2."""

from __future__ import annotations

import argparse


def measured_curve(prefix: int, repeats: int) -> list[tuple[int, float]]:
    """``[(nodes, seconds)]``: the fastest of ``repeats`` verify-cost calibrations of SmolLM2."""
    from specdec.estimate.verify_cost import VerifyCostModel
    from specdec.models import load_default
    from specdec.verify.hf import HFTarget

    model, _ = load_default()
    target = HFTarget(model)
    curves = [VerifyCostModel.calibrate(target, prefix_len=prefix) for _ in range(repeats)]
    return [(n, min(c.seconds[i] for c in curves)) for i, n in enumerate(curves[0].sizes)]


def parse_curve(text: str) -> list[tuple[int, float]]:
    """``"0:25.1,1:27.2,..."`` (nodes:ms) -> ``[(nodes, seconds)]``, sorted; SystemExit naming the problem."""
    try:
        pairs = sorted((int(n), float(ms) / 1e3) for n, ms in (p.split(":") for p in text.split(",")))
    except ValueError as exc:
        raise SystemExit(f"--cost must look like '0:25.1,1:27.2' (nodes:ms pairs), got {text!r}") from exc
    if not pairs or pairs[0][0] != 0:
        raise SystemExit(f"--cost needs a point at 0 nodes, got {text!r}")
    return pairs


def relative_costs(cost, up_to: int) -> list[float]:
    """``c(k) / c(0)`` for ``k = 0 .. up_to`` from a :class:`~specdec.estimate.verify_cost.VerifyCostModel`."""
    return [cost.cost(k) / cost.cost(0) for k in range(up_to + 1)]


def add_cost_args(ap: argparse.ArgumentParser) -> None:
    """``--cost`` / ``--prefix`` / ``--repeats``: a given verify-cost curve, or how to measure one."""
    ap.add_argument("--cost", default=None, help='verify cost curve "nodes:ms,..."; measured when omitted')
    ap.add_argument("--prefix", type=int, default=256, help="prefix length of the measured curve")
    ap.add_argument("--repeats", type=int, default=3, help="curves measured (fastest per size kept)")


def cost_model(args):
    """The :class:`~specdec.estimate.verify_cost.VerifyCostModel` the options of :func:`add_cost_args` name
    (printed, so every table states the curve it was priced with)."""
    from specdec.estimate.verify_cost import VerifyCostModel

    curve = parse_curve(args.cost) if args.cost else measured_curve(args.prefix, args.repeats)
    model = VerifyCostModel(sizes=[n for n, _ in curve], seconds=[s for _, s in curve])
    print("verify cost: " + model.describe())
    return model
