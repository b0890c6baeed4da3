"""Readable reference sampler: one tree, one node at a time, in plain Python + torch.

The simple implementation the kernels of :mod:`specdec.sampling.kernels` are benchmarked and
cross-checked against: every acceptance test is one Python step.
"""

from __future__ import annotations

import torch

from .rejection import AcceptResult, Rule
from ..tree import DraftTree


def reference_rejection_sample(tree: DraftTree, target_probs: torch.Tensor, *,
                               generator: torch.Generator | None = None) -> AcceptResult:
    """Multi-step speculative sampling over ``tree`` with ``target_probs [n + 1, V]``: children in node
    order, accept ``c`` when ``u < p(x) / q(x)``, else ``p <- norm(max(0, p - q))`` (``p`` if massless);
    with no child left draw from ``p``. No input validation (see :func:`specdec.rejection_sample`)."""
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
