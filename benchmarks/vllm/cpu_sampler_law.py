"""vLLM's CPU sampling kernel against the float64 softmax law, at a sample size of your choice.

Why: an audit's plain arm (vLLM without speculation) tests the engine's own sampler together with the
enumerated law. This tests the sampler alone: ``torch.ops._C.fused_gumbel_argmax``, what vLLM 0.32's
``Sampler`` runs on CPU, draws ``--draws`` tokens from each of a few float32 logit rows (a fresh
31-bit seed per draw, the kernel's input whichever way vLLM derives it), and each row's counts are
G-tested against ``softmax(logits.double())``. A float32 sampler that is off shows as a p-value
falling with the sample; an exact one gives uniform p-values at every size.

Run in .venv-vllm:

    .venv-vllm/bin/python -m benchmarks.vllm.cpu_sampler_law --draws 10000000
"""

from __future__ import annotations

import argparse
import time

import torch

from specdec.conformance import g_test


def rows(vocab: int) -> dict[str, torch.Tensor]:
    """Named float32 logit rows: random at two scales, a peaked row, and the scale of a tiny vocabulary's law."""
    g = torch.Generator().manual_seed(0)
    return {
        "randn x2 (V=16)": torch.randn(16, generator=g) * 2,
        "randn x4 / T=0.8 (V=16)": torch.randn(16, generator=g) * 4 / 0.8,
        "peaked (V=16)": torch.cat([torch.tensor([6.0]), torch.zeros(15)]),
        f"randn x3 (V={vocab})": torch.randn(vocab, generator=g) * 3,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=10**7, help="draws per row")
    ap.add_argument("--chunk", type=int, default=10**6, help="draws per kernel call (memory: chunk x V floats)")
    ap.add_argument("--vocab", type=int, default=256, help="vocabulary of the last row")
    args = ap.parse_args(argv)
    if args.draws < 1 or args.chunk < 1 or args.vocab < 2:
        ap.error("--draws and --chunk must be >= 1 and --vocab >= 2")
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    seeds = torch.Generator().manual_seed(1)
    for name, logits in rows(args.vocab).items():
        t0, v, counts = time.time(), logits.numel(), torch.zeros(logits.numel(), dtype=torch.long)
        for start in range(0, args.draws, args.chunk):
            n = min(args.chunk, args.draws - start)
            s = torch.randint(0, 2**31, (n,), generator=seeds, dtype=torch.long)
            counts += torch.bincount(torch.ops._C.fused_gumbel_argmax(logits.expand(n, v).contiguous(), s), minlength=v)
        law = torch.softmax(logits.double(), -1)
        g, dof, p = g_test(counts, law)[:3]
        tv = 0.5 * (counts.double() / counts.sum() - law).abs().sum().item()
        print(f"{name:26s} {args.draws:.0e} draws, {time.time() - t0:5.1f} s: G={g:.1f} dof={dof} p={p:.3g} "
              f"TV={tv:.2e}", flush=True)


if __name__ == "__main__":
    main()
