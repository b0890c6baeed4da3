"""Rejection-sampler micro-benchmarks: vectorised sampler vs the per-node Python loop, same run.

Run (numbers and date go to docs/exactness.md, "Performance")::

    SPECDEC_BENCH_THREADS=1 pytest benchmarks/kernels/sampling.py --benchmark-only \
        --benchmark-group-by=group --benchmark-columns=min,median,mean,rounds

or ``python -m benchmarks.kernels.sampling`` for a plain ratio table (best of repeated calls: on a
shared machine the minimum is the least noisy estimate of the cost itself).

Workloads (V = 49,152, the SmolLM2 vocabulary; float32 probabilities):

* chain: B = 64 requests, chain of 8 sampled drafts each (target rows ``[64, 9, V]`` padded,
  draft rows one ``[8, V]`` tensor per tree).
* tree: B = 4 requests, 64-node trees (4 sampled root children, then mixed sampled / top-k
  children down to depth 6), target rows ``[4, 65, V]``.

Drafts are drawn from q = softmax(target logits + noise), so acceptance is realistic (most
drafts accepted) rather than "reject the first token". Baseline: :func:`reference_rejection_sample`
called once per request (one Python step and ``.item()`` per tested node).
"""

from __future__ import annotations

import os
import statistics
import time

import pytest
import torch

from specdec import DraftTree
from specdec.sampling.rejection import rejection_sample_batch
from specdec.sampling.reference import reference_rejection_sample

V = 49152


def _threads() -> int:
    return int(os.environ.get("SPECDEC_BENCH_THREADS", "1"))


def _close_q(logits: torch.Tensor, g: torch.Generator, noise: float = 0.5) -> torch.Tensor:
    return torch.softmax(logits + noise * torch.randn(logits.shape, generator=g), -1)


def make_chain_workload(B: int = 64, N: int = 8, seed: int = 0):
    """``(trees, target [B, N + 1, V])`` for B sampled chains of length N."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, N + 1, V, generator=g) * 3
    target = torch.softmax(logits, -1)
    q = _close_q(logits[:, :N], g)
    tokens = torch.multinomial(q.reshape(-1, V), 1, generator=g).view(B, N)
    trees = [DraftTree.chain(tokens[b], q[b].contiguous()) for b in range(B)]
    return trees, target


def tree_parents(n: int = 64) -> tuple[list[int], list[bool]]:
    """A 64-node tree: 4 root children, each node gets up to 3 children breadth-first (depth <= 6);
    node j's first child is sampled, later siblings are deterministic (top-k style)."""
    parents, det = [-1] * 4, [False] * 4
    frontier, j = list(range(4)), 0
    while len(parents) < n:
        parent = frontier[j]
        for k in range(3):
            if len(parents) == n:
                break
            parents.append(parent)
            det.append(k > 0)
            frontier.append(len(parents) - 1)
        j += 1
    return parents, det


def make_tree_workload(B: int = 4, n: int = 64, seed: int = 1):
    """``(trees, target [B, n + 1, V])`` for B mixed trees of n nodes."""
    g = torch.Generator().manual_seed(seed)
    parents, det = tree_parents(n)
    logits = torch.randn(B, n + 1, V, generator=g) * 3
    target = torch.softmax(logits, -1)
    trees = []
    for b in range(B):
        # node i's draft distribution approximates the target row of its parent (row parents[i] + 1)
        q = _close_q(logits[b, torch.tensor(parents) + 1], g)
        tok = torch.multinomial(q, 1, generator=g).squeeze(1)
        top = q.argsort(1, descending=True)
        rank = {}
        for i, (p, d) in enumerate(zip(parents, det)):
            if d:
                rank[p] = rank.get(p, 0) + 1
                tok[i] = top[i, rank[p]]
        detb = torch.tensor(det)
        q = torch.where(detb.unsqueeze(1), torch.nn.functional.one_hot(tok, V).float(), q)
        trees.append(DraftTree(tok, torch.tensor(parents), q, detb))
    return trees, target


def vectorised(trees, target, seed=0, validate=True):
    return rejection_sample_batch(trees, target, generator=torch.Generator().manual_seed(seed), validate=validate)


def vectorised_unchecked(trees, target, seed=0):
    """Same, without the target-row validation (what a trusted caller such as the decoder uses
    after :func:`specdec.process_logits`; the loop baseline validates nothing either)."""
    return vectorised(trees, target, seed, validate=False)


def python_loop(trees, target, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [reference_rejection_sample(t, target[b, : t.num_nodes + 1], generator=g) for b, t in enumerate(trees)]


WORKLOADS = {"chain B=64 N=8 V=49152": (make_chain_workload, 64), "tree B=4 n=64 V=49152": (make_tree_workload, 4)}


@pytest.fixture(scope="module", params=list(WORKLOADS))
def workload(request):
    """``(group name, (trees, target), batch size)``, built once per module with the benchmark threads."""
    make, batch = WORKLOADS[request.param]
    before = torch.get_num_threads()
    torch.set_num_threads(_threads())
    yield request.param, make(), batch
    torch.set_num_threads(before)


def test_vectorised(benchmark, workload):
    group, args, batch = workload
    benchmark.group = group
    assert len(benchmark(vectorised, *args)) == batch


def test_vectorised_no_validation(benchmark, workload):
    group, args, _ = workload
    benchmark.group = group
    benchmark(vectorised_unchecked, *args)


def test_python_loop(benchmark, workload):
    group, args, batch = workload
    benchmark.group = group
    assert len(benchmark.pedantic(python_loop, args=args, rounds=3, iterations=1)) == batch


def _best_time(fn, args, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    torch.set_num_threads(_threads())
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, V={V}")
    workloads = (("chain B=64 N=8", make_chain_workload), ("tree B=4 n=64", make_tree_workload),
                 ("tree B=16 n=64", lambda: make_tree_workload(B=16)))
    for name, make in workloads:
        trees, target = make()
        vectorised(trees, target)  # warm-up
        accepted = statistics.mean(r.num_accepted for r in vectorised(trees, target))
        checked = _best_time(vectorised, (trees, target), 15)
        unchecked = _best_time(vectorised_unchecked, (trees, target), 15)
        loop = _best_time(python_loop, (trees, target), 7)
        print(f"{name}: python loop {loop * 1e3:.1f} ms | vectorised {checked * 1e3:.1f} ms (x{loop / checked:.1f}) | "
              f"vectorised, validate=False {unchecked * 1e3:.1f} ms (x{loop / unchecked:.1f}) | mean accepted "
              f"{accepted:.2f}")


if __name__ == "__main__":
    main()
