"""What several benchmark scripts share: the recorded-answer data, greedy replay, verify-cost curves.

Scripts import this module by name (``from common import ...``) because they run as
``python benchmarks/<script>.py``, which puts this folder on the path.
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Sequence

import numpy as np

from specdec.prompts import read_jsonl
from specdec.proposers.suffix import row_response_ids
from specdec.sampling.kernels import greedy_replay

DEFAULT_DATA = pathlib.Path(__file__).parent / "data" / "greedy_smollm2.jsonl"
VOCAB = 49152  # SmolLM2's vocabulary: the ids in DEFAULT_DATA


def read_rows(path: str) -> list[dict]:
    """JSONL rows with ``prompt_ids``, ``category`` and ``output_ids`` (``response_ids`` renamed)."""
    return [{**row, "output_ids": row_response_ids(row, f"{path}:{n}")} for n, row in read_jsonl(path)]


def ratio_ci(num: Sequence[float], den: Sequence[float], *, level: float = 0.95, reps: int = 4000,
             seed: int = 0) -> tuple[float, float]:
    """Paired bootstrap interval of ``sum(num) / sum(den)`` over items (prompts).

    ``num[i]`` and ``den[i]`` were measured on the same item, so an item is resampled with both of
    its values: a hard prompt slows both methods and must not widen the interval of their ratio.
    Why: per-category speedups rest on 2-3 prompts, and a difference smaller than this interval is
    not a result. Returns ``(lo, hi)``; a single item gives its own ratio twice.
    """
    a, b = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"ratio_ci needs two equal-length, non-empty sequences, got {a.shape} and {b.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    idx = np.random.default_rng(seed).integers(0, a.size, size=(reps, a.size))
    ratios = a[idx].sum(axis=1) / b[idx].sum(axis=1)
    lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def accepted_path(tokens: list[int], parents: list[int], truth: list[int]) -> list[int]:
    """Nodes of the longest root path whose tokens equal ``truth``'s prefix: what greedy verification
    accepts when the target's answer is ``truth`` (the library's own rule, :func:`greedy_replay`)."""
    return greedy_replay(tokens, parents, truth)


def accepted_length(tokens: list[int], parents: list[int], truth: list[int]) -> int:
    """Length of :func:`accepted_path`."""
    return len(accepted_path(tokens, parents, truth))


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
