"""The verify-cost curve ``c(n)``: seconds one target forward takes to verify ``n`` draft nodes per row.

A step over ``n`` nodes costs ``c(n)`` and emits ``1 + E[accepted]`` tokens per row; :mod:`specdec.control.sizer`
weighs the two. ``c`` is calibrated per target and batch size (:meth:`VerifyCostModel.calibrate`)
because its shape depends on the hardware and on how many rows share the forward: rows are padded to
the largest tree, so ``B`` rows of ``n`` nodes cost ``c_B(n)``, and a node that is nearly free for one
row (the weights are read anyway) is a real cost when ``B`` rows each add one.
(Engine-level step times: :mod:`specdec.estimate.step_cost`.)
"""

from __future__ import annotations

import bisect
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from ..tree import DraftTree


CALIBRATION_SIZES = (0, 1, 2, 4, 8, 16, 32, 64)
BATCH_CALIBRATION_SIZES = (0, 1, 2, 4, 8, 16)  # several rows: the sizer rarely keeps more nodes per row
COST_KIND = "specdec-verify-cost"


@dataclass
class VerifyCostModel:
    """Piecewise-linear verify time ``c(n)`` over measured tree sizes, for ``batch`` rows of ``n`` nodes each.

    Attributes:
        sizes: measured node counts per row, increasing, starting at 0.
        seconds: verify seconds at each size.
        prefix_len: committed prefix length the measurement used.
        batch: rows verified together.
    """

    sizes: list[int]
    seconds: list[float]
    prefix_len: int = 0
    batch: int = 1

    def __post_init__(self):
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"VerifyCostModel batch must be an int >= 1, got {self.batch!r}")
        if not self.sizes or self.sizes[0] != 0 or len(self.sizes) != len(self.seconds):
            raise ValueError("VerifyCostModel needs sizes starting at 0 and one time per size")
        if any(b <= a for a, b in zip(self.sizes, self.sizes[1:])):
            raise ValueError(f"VerifyCostModel sizes must increase strictly, got {self.sizes}")
        if min(self.seconds) <= 0:
            raise ValueError("VerifyCostModel times must be positive")
        self._monotone()

    def _monotone(self) -> None:
        """Cost never falls with more nodes: measurement noise must not reward bigger trees."""
        self.seconds = list(itertools.accumulate(self.seconds, max))

    def _segment(self, n: int) -> tuple[int, float]:
        """``(i, t)``: ``n`` at fraction ``t`` between ``sizes[i]`` and ``sizes[i + 1]`` (``t > 1`` past the end)."""
        if n < 0:
            raise ValueError(f"tree size must be >= 0, got {n}")
        i = min(bisect.bisect_right(self.sizes, n) - 1, len(self.sizes) - 2)
        return i, (n - self.sizes[i]) / (self.sizes[i + 1] - self.sizes[i])

    @property
    def max_nodes(self) -> int:
        return self.sizes[-1]

    def cost(self, n: int) -> float:
        """Seconds to verify ``n`` nodes (linear between measurements and past the last one)."""
        if len(self.sizes) == 1:
            if n < 0:
                raise ValueError(f"tree size must be >= 0, got {n}")
            return self.seconds[0]
        i, t = self._segment(n)
        return self.seconds[i] + (self.seconds[i + 1] - self.seconds[i]) * t

    def observe(self, n: int, seconds: float, weight: float = 0.05) -> None:
        """Fold one measured verify of ``n`` nodes in: the two sizes around ``n`` scale by
        ``(seconds / cost(n)) ** (weight * share)`` (``share``: interpolation weight), so the curve
        drifts toward real step costs without one noisy step moving it much."""
        if n < 0 or seconds <= 0 or not 0 < weight <= 1:
            raise ValueError(f"observe needs n >= 0, seconds > 0 and weight in (0, 1], got {n}, {seconds}, {weight}")
        ratio = seconds / self.cost(n)
        if len(self.sizes) == 1:
            self.seconds[0] *= ratio ** weight
            return
        i, t = self._segment(n)
        if t > 1:  # past the last calibrated size: only the last point moves
            self.seconds[-1] *= ratio ** weight
        else:
            self.seconds[i] *= ratio ** (weight * (1 - t))
            self.seconds[i + 1] *= ratio ** (weight * t)
        self._monotone()

    def best_size(self, path_probs: Sequence[float], draft_overhead: float = 0.0) -> int:
        """``k`` maximising ``(1 + sum(top-k path_probs)) / (cost(k) + draft_overhead [k > 0])``
        (``k <= max_nodes``); ``draft_overhead``: seconds a step spends outside the verify forward
        only because it drafted (the decoder measures it). One row: :meth:`best_shared_size`."""
        return self.best_shared_size([path_probs], draft_overhead)

    def best_shared_size(self, rows: Sequence[Sequence[float]], draft_overhead: float = 0.0) -> int:
        """The one node count ``k`` per row that maximises a step's expected tokens per second,
        ``sum over rows of (1 + sum(its top-k path_probs)) / (cost(k) + draft_overhead [k > 0])``:
        rows share one forward padded to the largest tree, so a row given fewer nodes saves nothing.
        ``k = 0``: no row drafts. ``draft_overhead``: the whole step's extra seconds for drafting."""
        if draft_overhead < 0:
            raise ValueError(f"draft_overhead must be >= 0 seconds, got {draft_overhead}")
        probs = [sorted((float(p) for p in row), reverse=True)[: self.max_nodes] for row in rows]
        gain = float(len(probs))
        best_k, best_rate = 0, gain / self.cost(0)
        for k in range(1, max((len(p) for p in probs), default=0) + 1):
            gain += sum(p[k - 1] for p in probs if len(p) >= k)
            rate = gain / (self.cost(k) + draft_overhead)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    def for_batch(self, batch: int) -> "VerifyCostModel":
        """An estimate of the ``batch``-row curve from this one-row curve, where no measured one exists:
        ``batch`` rows of ``n`` nodes read as one row of the same ``batch * (1 + n) - 1`` tokens (the
        products dominate; per-row attention is left out, so it errs cheap)."""
        if self.batch != 1:
            raise ValueError(f"for_batch derives from a one-row curve, this one has batch {self.batch}")
        return VerifyCostModel(sizes=list(self.sizes), seconds=[self.cost(batch * (1 + n) - 1) for n in self.sizes],
                               prefix_len=self.prefix_len, batch=batch)

    @classmethod
    def calibrate(cls, target, *, prefix_len: int = 256, sizes: Sequence[int] | None = None,
                  repeats: int = 2, seed: int = 0, batch: int = 1) -> "VerifyCostModel":
        """Time ``target.verify`` of ``batch`` rows, each a chain of each size over its own random
        ``prefix_len``-token prefix, keeping each size's fastest repeat (interference only adds time);
        ``len(sizes) * (repeats + 1)`` forwards. ``sizes`` default: :data:`CALIBRATION_SIZES` for one
        row, :data:`BATCH_CALIBRATION_SIZES` for several."""
        if sizes is None:
            sizes = CALIBRATION_SIZES if batch == 1 else BATCH_CALIBRATION_SIZES
        limit = getattr(target, "max_positions", None)
        if limit is not None:  # the prefix and the longest chain must fit the model's positions
            prefix_len = max(1, min(prefix_len, limit - 1 - max(sizes)))
        gen = torch.Generator().manual_seed(seed)
        prompts = [torch.randint(0, target.vocab_size, (prefix_len,), generator=gen).tolist() for _ in range(batch)]
        state, _, _ = target.prefill(prompts)
        target.set_pending(state, [p[-1] for p in prompts])
        trees = [[DraftTree.chain(torch.randint(0, target.vocab_size, (n,), generator=gen))] * batch for n in sizes]
        times: list[list[float]] = [[] for _ in sizes]
        for sweep in range(repeats + 1):  # sweeps interleave sizes, so a burst of load hits them alike
            for i, rows in enumerate(trees):
                t0 = time.perf_counter()
                target.verify(state, rows)
                elapsed = time.perf_counter() - t0
                target.discard(state)
                if sweep:  # the first sweep warms caches and the allocator for every shape
                    times[i].append(elapsed)
        seconds = [min(t) for t in times]
        return cls(sizes=list(sizes), seconds=seconds, prefix_len=prefix_len, batch=batch)

    def describe(self) -> str:
        rows = f"{self.batch} rows: " if self.batch > 1 else ""
        return rows + ", ".join(f"n={n}: {1e3 * s:.1f} ms" for n, s in zip(self.sizes, self.seconds))

    def save(self, path: str | Path) -> None:
        """Write the curve as JSON, so a later run reuses it instead of calibrating again."""
        Path(path).write_text(json.dumps({"kind": COST_KIND, "sizes": self.sizes, "seconds": self.seconds,
                                          "prefix_len": self.prefix_len, "batch": self.batch}, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "VerifyCostModel":
        """A curve :meth:`save` wrote. Raises ValueError naming the file when it is not one."""
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ValueError(f"cannot read verify cost file {str(path)!r}: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict) or data.get("kind") != COST_KIND:
            raise ValueError(f"{path}: not a specdec verify cost file (written by VerifyCostModel.save)")
        try:
            return cls(sizes=[int(n) for n in data["sizes"]], seconds=[float(t) for t in data["seconds"]],
                       prefix_len=int(data.get("prefix_len", 0)), batch=int(data.get("batch", 1)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: bad verify cost curve ({exc})") from exc


def curves_by_batch(cost_model) -> dict[int, VerifyCostModel]:
    """``cost_model`` (None, one curve or several) as ``{batch: curve}``. TypeError for anything but
    curves; ValueError unless the batch sizes are distinct and one of them is 1 (one row)."""
    if cost_model is None:
        return {}
    curves = [cost_model] if isinstance(cost_model, VerifyCostModel) else (
        list(cost_model) if isinstance(cost_model, (list, tuple)) else [cost_model])
    bad = next((c for c in curves if not isinstance(c, VerifyCostModel)), None)
    if bad is not None:
        raise TypeError(f"cost_model must be a VerifyCostModel or a sequence of them, got a {type(bad).__name__}")
    batches = [c.batch for c in curves]
    if 1 not in batches or len(set(batches)) != len(batches):
        raise ValueError(f"cost_model curves need distinct batch sizes, one of them 1 (one row), got {batches}")
    return {c.batch: c for c in curves}
