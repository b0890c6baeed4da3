"""Print the conformance suite's verdict on the real samplers and its measured power on the mutants.

``python -m specdec.conformance.report [--trials N]``: per sampler, tests rejecting it at the Bonferroni
level, the smallest p-value and the first failure (exact samplers: 0; every mutant: at least one).
"""

from __future__ import annotations

import argparse
import time

import torch

from .suite import FAMILY_ALPHA, default_cases, padded_sampler, run_suite
from .mutants import MUTANTS, kernel_sampler
from ..sampling.rejection import rejection_sample_padded
from ..sampling.kernels import TreeSpeculative


def power_table(trials: int = 20000) -> list[str]:
    """Markdown rows ``| sampler | rejected tests | min p | first rejection | seconds |``."""
    cases = default_cases(trials=trials)
    samplers = {"rejection_sample_padded (production)": padded_sampler(rejection_sample_padded),
                "TreeSpeculative (mutants' base)": kernel_sampler(TreeSpeculative())}
    samplers.update({f"mutant: {name}": kernel_sampler(cls()) for name, cls in MUTANTS.items()})
    m = 3 * len(cases)
    rows = [
        f"Family alpha {FAMILY_ALPHA}, {m} tests, per-test alpha {FAMILY_ALPHA / m:.2e}, {trials} trials per case.",
        "",
        "| sampler | rejected tests | min p-value | first rejection | seconds |",
        "|---|---|---|---|---|",
    ]
    for name, sampler in samplers.items():
        start = time.perf_counter()
        report = run_suite(sampler, cases)
        first = str(report.failures[0]) if report.failures else "-"
        rows.append(
            f"| {name} | {len(report.failures)}/{m} | {report.min_p:.3g} | {first} | "
            f"{time.perf_counter() - start:.1f} |"
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000, help="Monte-Carlo trials per case (default 20000)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("\n".join(power_table(args.trials)))


if __name__ == "__main__":
    main()
