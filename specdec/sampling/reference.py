"""Readable reference sampler: one tree, one node at a time, in plain Python + torch.

This is the straightforward implementation the vectorised kernels in
:mod:`specdec.sampling.kernels` are measured against (benchmarks/bench_sampling.py) and cross-checked
with (tests/conformance/test_suite.py runs it through the conformance suite). It is deliberately simple:
every acceptance test is one Python step and one ``.item()`` sync.
"""

from __future__ import annotations

import torch

from .rejection import AcceptResult, Rule
from ..tree import DraftTree


def reference_rejection_sample(tree: DraftTree, target_probs: torch.Tensor, *,
                               generator: torch.Generator | None = None) -> AcceptResult:
    """Multi-step speculative sampling over ``tree`` with target rows ``target_probs [n + 1, V]``.

    Walk from the root. At a node whose working distribution is ``p`` (the target row after it),
    try its children in node order: child ``c`` (token ``x``, draft distribution ``q`` = its
    ``draft_probs`` row, or the point mass on ``x`` if deterministic) is accepted when
    ``u < p(x) / q(x)``; then move to ``c``. Otherwise ``p <- norm(max(0, p - q))`` (kept as ``p`` if
    that has no mass) and try the next sibling. With no child left, emit one token drawn from ``p``.
    No input validation: use :func:`specdec.rejection_sample` for that.
    """
    V = target_probs.shape[1]
    tokens = tree.tokens.tolist()
    path: list[int] = []
    emitted: list[int] = []
    p = target_probs[0].double()
    node = -1
    while True:
        accepted = None
        for child in tree.children_of(node):
            x = tokens[child]
            if bool(tree.deterministic[child]):
                q = torch.zeros(V, dtype=torch.float64)
                q[x] = 1.0
            else:
                q = tree.draft_probs[child].double()
            u = torch.rand((), dtype=torch.float64, generator=generator).item()
            if u * q[x].item() < p[x].item():
                accepted = child
                break
            r = (p - q).clamp(min=0)
            if r.sum().item() > 0:
                p = r / r.sum()
        if accepted is None:
            emitted.append(int(torch.multinomial(p, 1, generator=generator).item()))
            break
        path.append(accepted)
        emitted.append(tokens[accepted])
        node = accepted
        p = target_probs[accepted + 1].double()
    rule = Rule.CHAIN if tree.is_chain else Rule.TREE_MIXED
    return AcceptResult(torch.tensor(emitted, dtype=torch.long), torch.tensor(path, dtype=torch.long), rule)
