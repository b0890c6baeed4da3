"""The audit's two-sample test and its calibrated power, on the conformance suite's G statistic.

The one-sample test is :func:`specdec.conformance.suite.window_law_tests` itself; the method is in docs/audit.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from scipy import stats

from ..suite import MIN_EXPECTED, GTestResult, g_test


def window_codes(seqs: torch.Tensor, symbols: int, first: int, last: int) -> torch.Tensor:
    """Base-``symbols`` codes of symbols ``first..last`` (1-based, inclusive) of ``seqs [T, L]``."""
    idx = torch.zeros(seqs.shape[0], dtype=torch.long)
    for j in range(first - 1, last):
        idx = idx * symbols + seqs[:, j]
    return idx


def _homogeneity(a: torch.Tensor, b: torch.Tensor) -> tuple[float, int]:
    """G and dof of the 2 x C test of counts ``a``, ``b`` (same cells), sparse cells pooled."""
    na, nb = float(a.sum()), float(b.sum())
    if na == 0 or nb == 0:
        return 0.0, 0
    pooled = (a + b).double() / (na + nb)
    live = pooled > 0
    a, b, pooled = a[live].double(), b[live].double(), pooled[live]
    sparse = pooled * min(na, nb) < MIN_EXPECTED
    if bool(sparse.any()):
        pa, pb, pp = a[sparse].sum(), b[sparse].sum(), pooled[sparse].sum()
        a, b, pooled = a[~sparse], b[~sparse], pooled[~sparse]
        if pp * min(na, nb) < MIN_EXPECTED and pooled.numel():
            j = int(pooled.argmin())
            a[j], b[j], pooled[j] = a[j] + pa, b[j] + pb, pooled[j] + pp
        else:
            a, b, pooled = torch.cat([a, pa.view(1)]), torch.cat([b, pb.view(1)]), torch.cat([pooled, pp.view(1)])
    dof = int(pooled.numel()) - 1
    if dof < 1:
        return 0.0, 0
    g = g_test(a, pooled, min_expected=0.0)[0] + g_test(b, pooled, min_expected=0.0)[0]
    return float(g), dof


def two_sample_tests(name: str, strata: Sequence[tuple[torch.Tensor, torch.Tensor]], symbols: int,
                     windows: Sequence[tuple[int, int]]) -> list[GTestResult]:
    """One 2 x C homogeneity G test per window of ``strata``, pairs ``(seqs_a [Ta, L], seqs_b [Tb, L])``;
    G and dof add over strata."""
    results = []
    for first, last in windows:
        g_sum, dof_sum = 0.0, 0
        cells = symbols ** (last - first + 1)
        for a, b in strata:
            ca = torch.bincount(window_codes(a, symbols, first, last), minlength=cells)
            cb = torch.bincount(window_codes(b, symbols, first, last), minlength=cells)
            g, dof = _homogeneity(ca, cb)
            g_sum, dof_sum = g_sum + g, dof_sum + dof
        p = float(stats.chi2.sf(g_sum, dof_sum)) if dof_sum else 1.0
        results.append(GTestResult(name, last, g_sum, dof_sum, p, 0, first))
    return results


@dataclass(frozen=True)
class Power:
    """The perturbation arm's finding: ``min_tv`` detected in ``>= power`` of ``replicates`` (None: not even
    ``max_tv = TV(P, R)``), ``null_rejections`` of the exact law (~0), ``tried`` ``(tv, rate)`` pairs."""

    min_tv: float | None
    max_tv: float
    power: float
    replicates: int
    null_rejections: int
    tried: tuple[tuple[float, float], ...]


def flattened(law: torch.Tensor, power: float = 2 / 3) -> torch.Tensor:
    """``law ** power`` renormalised: the same support, flatter (as if sampled hotter)."""
    r = law.clamp_min(0) ** power
    return r / r.sum()


class WindowTester:
    """The one-sample window tests of fixed laws and sizes, marginals and pooling (``g_test``'s rule) prepared
    once. :meth:`p_values` equals :func:`~specdec.conformance.suite.window_law_tests` (tested)."""

    def __init__(self, laws: Sequence[torch.Tensor], sizes: Sequence[int], symbols: int, length: int,
                 windows: Sequence[tuple[int, int]]):
        self.symbols, self.length, self.windows = symbols, length, tuple(windows)
        self.prepared = []  # per window: [(bin of each cell (-1: probability 0), probs of the bins)] per stratum
        for first, last in self.windows:
            per = []
            for law, n in zip(laws, sizes):
                table = law.view(*([symbols] * length))
                outside = tuple(j for j in range(length) if not first - 1 <= j < last)
                probs = (table.sum(dim=outside) if outside else table).reshape(-1).double()
                per.append(self._pool(probs, n))
            self.prepared.append(per)

    @staticmethod
    def _pool(probs: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        support = probs > 0
        exp = probs * n
        sparse = support & (exp < MIN_EXPECTED)
        kept = support & ~sparse
        bins = torch.full(probs.shape, -1, dtype=torch.long)
        k = int(kept.sum())
        bins[kept] = torch.arange(k)
        if bool(sparse.any()):
            if float(exp[sparse].sum()) < MIN_EXPECTED and k:
                bins[sparse] = int(bins[kept][exp[kept].argmin()])
            else:
                bins[sparse] = k
                k += 1
        bin_probs = torch.zeros(k, dtype=torch.float64).index_add_(0, bins[support], probs[support])
        return bins, bin_probs

    def window_code(self, codes: torch.Tensor, first: int, last: int) -> torch.Tensor:
        """Codes of symbols ``first..last`` from full-sequence codes (base ``symbols``, ``length`` digits)."""
        return (codes // self.symbols ** (self.length - last)) % self.symbols ** (last - first + 1)

    def p_values(self, codes: Sequence[torch.Tensor]) -> list[float]:
        """One p-value per window for strata of full-sequence ``codes`` (one LongTensor per stratum)."""
        out = []
        for (first, last), per in zip(self.windows, self.prepared):
            g_sum, dof_sum = 0.0, 0
            for c, (bins, bin_probs) in zip(codes, per):
                b = bins[self.window_code(c, first, last)]
                if bool((b < 0).any()):
                    g_sum = float("inf")
                    break
                g, dof, _, _ = g_test(torch.bincount(b, minlength=bin_probs.numel()), bin_probs, min_expected=0.0)
                g_sum, dof_sum = g_sum + g, dof_sum + dof
            if g_sum == float("inf"):
                out.append(0.0)
            else:
                out.append(float(stats.chi2.sf(g_sum, dof_sum)) if dof_sum else 1.0)
        return out


def detectable_tv(laws: Sequence[torch.Tensor], alternatives: Sequence[torch.Tensor], sizes: Sequence[int],
                  symbols: int, length: int, windows: Sequence[tuple[int, int]], alpha: float, *,
                  power: float = 0.8, replicates: int = 30, steps: int = 6, seed: int = 0) -> Power:
    """:class:`Power` of the one-sample test on ``laws`` (``float64 [symbols ** length]``, ``sizes`` samples each)
    mixed toward ``alternatives``; TV is sample-weighted over strata; log-space bisection from ``1e-3`` to 1."""
    gen = torch.Generator().manual_seed(seed)
    tester = WindowTester(laws, sizes, symbols, length, windows)
    weights = [n / sum(sizes) for n in sizes]
    max_tv = float(sum(w * 0.5 * (p - r).abs().sum() for w, p, r in zip(weights, laws, alternatives)))

    def detected(e: float) -> bool:
        codes = [torch.multinomial(((1 - e) * p + e * r).clamp_min(0), n, replacement=True, generator=gen)
                 for p, r, n in zip(laws, alternatives, sizes)]
        return min(tester.p_values(codes)) < alpha

    def rate(e: float) -> float:
        return sum(detected(e) for _ in range(replicates)) / replicates

    null = sum(detected(0.0) for _ in range(replicates))
    top = rate(1.0)
    tried = [(max_tv, top)]
    if top < power or max_tv == 0:
        return Power(None, max_tv, power, replicates, null, tuple(tried))
    lo, hi = -3.0, 0.0  # log10 of the mixing weight: hi is detected
    for _ in range(steps):
        mid = (lo + hi) / 2
        r = rate(10 ** mid)
        tried.append((max_tv * 10 ** mid, r))
        if r >= power:
            hi = mid
        else:
            lo = mid
    return Power(max_tv * 10 ** hi, max_tv, power, replicates, null, tuple(sorted(tried)))
