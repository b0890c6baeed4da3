"""Deliberately broken decoders: the end-to-end law test must reject every one of them.

Each mutant is :class:`~specdec.verify.hf.HFTarget` (or a proposer wrapper) with one plausible mistake
in one overridden method, so a pass of :mod:`specdec.conformance.decoder_law` shows it sees that
mistake. Use one as the decoder's target: ``SpeculativeDecoder(MUTANTS["kv_chain_rows"](model), ...)``.
Two must pass (they test the harness): :class:`InPlaceCompaction` (first row first is exact, since a
destination ``L + 1 + j`` lies below every later source) and :class:`ReversedPathCompaction`
(attention reads committed rows as a set, each key carrying its own rotary position).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Hashable, Sequence

import torch

from ..tree import DraftTree
from ..verify.hf import BatchState, HFTarget, VerifyOutput


class ChainRowsCompaction(HFTarget):
    """Keeps the rows of nodes ``0 .. len(path) - 1`` instead of the accepted path's nodes."""

    def _compact(self, state: BatchState, paths, next_tokens, num_nodes) -> None:
        super()._compact(state, [list(range(len(p))) for p in paths], next_tokens, num_nodes)


class ReversedPathCompaction(HFTarget):
    """Equivalent mutant: the accepted rows land in reversed order inside the committed range."""

    def _compact(self, state: BatchState, paths, next_tokens, num_nodes) -> None:
        super()._compact(state, [list(reversed(p)) for p in paths], next_tokens, num_nodes)


class InPlaceCompaction(HFTarget):
    """Moves each kept row with its own in-place copy, in :attr:`reverse` order (then restores the
    sources so HFTarget's own compaction moves exactly what the copies left)."""

    reverse = False

    @torch.inference_mode()
    def _compact(self, state: BatchState, paths, next_tokens, num_nodes) -> None:
        moves = [(b, L + 1 + i, L + 1 + node) for b, (L, p) in enumerate(zip(state.lengths, paths))
                 for i, node in enumerate(p) if node != i]
        if moves:
            order = list(reversed(moves)) if self.reverse else moves
            b_idx, dst, src = (torch.tensor(v, device=self.device) for v in zip(*moves))
            for layer in state.cache.layers:
                for name in ("keys", "values"):
                    t = getattr(layer, name)
                    for b, d, s in order:
                        t[b, :, d] = t[b, :, s]
                    t[b_idx, :, src] = t[b_idx, :, dst]
        super()._compact(state, paths, next_tokens, num_nodes)


class ReverseInPlaceCompaction(InPlaceCompaction):
    """In-place row copies, last row first: an overlapping source is overwritten before it is read."""

    reverse = True


class NodeIndexPositions(HFTarget):
    """Tree node ``i`` at position ``L + 1 + i`` (its index) instead of ``L + depth(i)``."""

    def _tree_inputs(self, state: BatchState, trees):
        ids, pos, mask, extra = super()._tree_inputs(state, trees)
        pos = pos.clone()
        pos[:, 1:] = pos[:, :1] + 1 + torch.arange(pos.shape[1] - 1)
        return ids, pos, mask, extra


class CacheLengthPositions(HFTarget):
    """Positions counted from the shared cache length ``S`` instead of each request's ``lengths[b]``."""

    def _tree_inputs(self, state: BatchState, trees):
        ids, pos, mask, extra = super()._tree_inputs(state, trees)
        lengths = torch.tensor(state.lengths, dtype=pos.dtype).unsqueeze(1)
        return ids, pos - lengths + state.cache_len, mask, extra


class PreviousRowLogits(HFTarget):
    """The verify output's node rows shifted by one: the sampler reads row ``i`` as the law after node ``i``."""

    def verify(self, state: BatchState, trees) -> VerifyOutput:
        out = super().verify(state, trees)
        shifted = torch.cat([out.logits[:, :1], out.logits[:, :-1]], 1)
        return VerifyOutput(logits=shifted, hidden=out.hidden, trees=out.trees)


class MisreportedDraftProbs:
    """Wraps an (unscored) sampling proposer and reports ``q^power`` renormalised for every sampled
    node: the token was drawn from ``q``, the sampler is told another law."""

    def __init__(self, proposer, power: float = 2.0):
        self.proposer, self.power = proposer, power
        self.artifact = proposer.artifact
        self.requires_target_hidden = proposer.requires_target_hidden

    def begin(self, req_id: Hashable, prompt_ids: Sequence[int], **kw) -> None:
        self.proposer.begin(req_id, prompt_ids, **kw)

    def commit(self, req_id: Hashable, accepted_ids: Sequence[int], **kw) -> None:
        self.proposer.commit(req_id, accepted_ids, **kw)

    def end(self, req_id: Hashable) -> None:
        self.proposer.end(req_id)

    def memory_bytes(self) -> int:
        return self.proposer.memory_bytes()

    def propose(self, req_ids, budget) -> list[DraftTree]:
        return [self._misreport(t) for t in self.proposer.propose(req_ids, budget)]

    def _misreport(self, tree: DraftTree) -> DraftTree:
        if tree.draft_probs is None or tree.num_nodes == 0:
            return tree
        q = tree.draft_probs ** self.power
        q = torch.where(tree.deterministic.unsqueeze(1), tree.draft_probs, q / q.sum(1, keepdim=True))
        return DraftTree(tree.tokens, tree.parents, q, tree.deterministic, vocab_size=q.shape[1])


TARGET_MUTANTS: "MappingProxyType[str, type[HFTarget]]" = MappingProxyType({
    "kv_chain_rows": ChainRowsCompaction,
    "kv_reverse_in_place": ReverseInPlaceCompaction,
    "positions_node_index": NodeIndexPositions,
    "positions_cache_length": CacheLengthPositions,
    "logits_previous_row": PreviousRowLogits,
})
"""Name -> HFTarget subclass with one bug (read-only); each must fail the end-to-end law test."""

EXACT_VARIANTS: "MappingProxyType[str, type[HFTarget]]" = MappingProxyType({
    "kv_in_place_forward": InPlaceCompaction,
    "kv_reversed_path_equivalent": ReversedPathCompaction,
})
"""HFTarget subclasses that change the code but not the law: each must pass."""
