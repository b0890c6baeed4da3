"""The sampled-law test of tests/vllm/test_vllm_sampling_law.py at a sample size of your choice.

Why: the engine test runs 3000 seeded requests per arm, so its p-values are fixed numbers for
those seeds. A low one is either a real bias, which grows with the sample, or a chance low for
those seeds, which does not. This runs one or more arms at ``TRIALS`` requests (``--law
temperature``: temperature 0.8; ``--law full``: also top-k 10, top-p 0.95) and G-tests every
marginal and joint of the first three tokens against the exact law, so the two can be told apart.

Arms: ``control`` (no speculation) and ``fixed`` (the suffix drafter, specdec's CPU expand fix).

Run in .venv-vllm, from the checkout's root (the engine test's builders come from ``tests.vllm``):

    VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python -m benchmarks.vllm.law_samples 36000 fixed,control
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from specdec.conformance import g_test
from tests.vllm.engines import engine, spec_config, tiny_llama
from tests.vllm.sampling_law import FULL, TEMPERATURE, VOCAB, emitted, exact_law


def p_values(seqs: np.ndarray, law: torch.Tensor) -> dict[str, float]:
    """G-test p-value of each marginal and joint of the first three tokens; ``law [V, V, V]``."""
    v = law.shape[0]
    cells = {
        "t1": (seqs[:, 0], law.sum((1, 2))),
        "t2": (seqs[:, 1], law.sum((0, 2))),
        "t3": (seqs[:, 2], law.sum((0, 1))),
        "t1t2": (seqs[:, 0] * v + seqs[:, 1], law.sum(2)),
        "t2t3": (seqs[:, 1] * v + seqs[:, 2], law.sum(0)),
        "t1t2t3": ((seqs[:, 0] * v + seqs[:, 1]) * v + seqs[:, 2], law),
    }
    out = {}
    for name, (idx, probs) in cells.items():
        observed = torch.bincount(torch.from_numpy(idx.astype(np.int64)), minlength=probs.numel())
        out[name] = float(g_test(observed, probs.reshape(-1))[2])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trials", type=int, help="seeded requests per arm")
    ap.add_argument("arms", help="comma-separated: control, fixed")
    ap.add_argument("--law", choices=("temperature", "full"), default="temperature")
    ap.add_argument("--first-seed", type=int, default=0, help="requests are seeded first_seed..first_seed+trials-1")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    if args.trials < 1 or not set(arms) <= {"control", "fixed"}:
        ap.error("trials must be >= 1 and arms a comma-separated subset of control,fixed")
    if args.first_seed < 0:
        ap.error(f"--first-seed must be >= 0, got {args.first_seed}")
    settings = TEMPERATURE if args.law == "temperature" else FULL
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_llama(Path(tmp) / "llama", vocab=VOCAB, scale=4.0, seed=7)
        law = exact_law(model, settings)
        for arm in arms:
            t0 = time.time()
            with engine(model, speculative=None if arm == "control" else spec_config(3), max_num_seqs=64,
                        max_model_len=64) as llm:
                seqs = emitted(llm, settings, args.trials, args.first_seed)
            pv = p_values(seqs, law)
            print(f"{arm:8s} {args.law} {args.trials} requests from seed {args.first_seed}, {time.time() - t0:.0f} s: "
                  + ", ".join(f"{k} p={v:.2e}" for k, v in pv.items()), flush=True)


if __name__ == "__main__":
    main()
