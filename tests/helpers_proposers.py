"""Test proposers: random deterministic trees and sampled chains/trees with their exact q."""

from __future__ import annotations

import torch

from specdec import DraftTree
from specdec.proposers.base import Artifact
from specdec.checks import normalize_budgets


class RandomTreeProposer:
    """Drafts random deterministic trees (random shape and tokens, mostly wrong)."""

    requires_target_hidden = False

    def __init__(self, vocab_size: int, seed: int = 0):
        self.vocab_size = vocab_size
        self.gen = torch.Generator().manual_seed(seed)
        self.open: set = set()
        self.artifact = Artifact("random-tree")

    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None):
        self.open.add(req_id)

    def propose(self, req_ids, budget):
        out = []
        for rid, b in zip(req_ids, normalize_budgets(req_ids, budget)):
            assert rid in self.open
            n = int(torch.randint(0, b + 1, (1,), generator=self.gen))
            parents = [int(torch.randint(-1, i, (1,), generator=self.gen)) if i else -1 for i in range(n)]
            tokens = torch.randint(0, self.vocab_size, (n,), generator=self.gen)
            out.append(DraftTree(tokens, torch.tensor(parents, dtype=torch.int32), vocab_size=self.vocab_size))
        return out

    def commit(self, req_id, accepted_ids, *, target_hidden=None):
        assert req_id in self.open and len(accepted_ids) >= 1

    def end(self, req_id):
        self.open.remove(req_id)

    def memory_bytes(self):
        return 0


class SampledTreeProposer(RandomTreeProposer):
    """Drafts sampled nodes from a fixed context-free q: two i.i.d. root children, each with one child."""

    def __init__(self, vocab_size: int, seed: int = 0):
        super().__init__(vocab_size, seed)
        self.q = torch.softmax(torch.randn(vocab_size, generator=self.gen) * 2, -1)

    def propose(self, req_ids, budget):
        out = []
        for rid, b in zip(req_ids, normalize_budgets(req_ids, budget)):
            parents = [-1, -1, 0, 1][: min(b, 4)]
            n = len(parents)
            tokens = (
                torch.multinomial(self.q, n, replacement=True, generator=self.gen)
                if n
                else torch.zeros(0, dtype=torch.long)
            )
            probs = self.q.expand(n, -1).clone()
            out.append(DraftTree(tokens, torch.tensor(parents, dtype=torch.int32), probs))
        return out
