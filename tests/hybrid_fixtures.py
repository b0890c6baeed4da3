"""A fixed scored proposer for the hybrid's tests (test_hybrid.py, test_model_gate.py)."""

import torch

from specdec import Artifact, DraftTree
from specdec.proposers.base import ScoredDraft


class FixedDraft:
    """Drafts one fixed tree every step, scored ``probs``, under source name ``source``.

    ``hidden`` is what it claims for ``requires_target_hidden`` (True: it stands in for EAGLE).
    Each propose call advances ``clock.t`` (when given) by ``cost`` seconds per request, so a fake
    clock sees what drafting cost, and first by what feeding the request's queue costs, as EAGLE's
    lazy feed does (``feed_queued``): ``prompt_feed_cost`` after ``begin``, ``feed_cost`` after commits.
    ``calls`` counts the requests drafted for, ``by_request`` per request.
    """

    target_layers = None

    def __init__(self, paths, probs, *, hidden=True, clock=None, cost=0.0, feed_cost=0.0, prompt_feed_cost=0.0,
                 source="x", vocab_size=64):
        self.requires_target_hidden, self.vocab_size, self.source = hidden, vocab_size, source
        self.feed_cost, self.prompt_feed_cost, self.queued = feed_cost, prompt_feed_cost, {}
        self.tree = DraftTree.from_paths(paths) if paths else DraftTree.empty(vocab_size=vocab_size)
        self.probs, self.clock, self.cost, self.calls = torch.tensor(probs), clock, cost, 0
        self.by_request = {}
        self.artifact = Artifact("fixed", "target", "fp")

    def begin(self, req_id, *a, **k):
        self.queued[req_id] = self.prompt_feed_cost

    def commit(self, req_id, *a, **k):
        self.queued[req_id] = max(self.queued.get(req_id, 0.0), self.feed_cost)

    def end(self, *a): pass

    def feed_queued(self, req_id):
        """Like EAGLE's lazy feed: the queued prompt or commits cost their seconds once, here or at the
        next draft."""
        seconds = self.queued.pop(req_id, 0.0)
        if self.clock is not None:
            self.clock.t += seconds

    def memory_bytes(self): return 0

    def propose_scored(self, req_ids, budget):
        self.calls += len(req_ids)
        for r in req_ids:
            self.feed_queued(r)
            self.by_request[r] = self.by_request.get(r, 0) + 1
        if self.clock is not None:
            self.clock.t += self.cost * len(req_ids)
        return [ScoredDraft(self.tree, self.probs, float(self.probs.sum()), self.source) for _ in req_ids]
