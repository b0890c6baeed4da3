"""Deliberately broken samplers: the conformance suite must reject every one of them.

Each mutant is :class:`~specdec.sampling.kernels.TreeSpeculative` with exactly one step replaced by a
plausible implementation mistake, so a pass of the suite is evidence that it can see that mistake.
:class:`~specdec.sampling.kernels.TreeSpeculative` itself (no override) runs through the same adapter
and must pass: the harness, not only the mutation, is under test.

Use ``kernel_sampler(MUTANTS["always_accept"]())`` to get a conformance sampler.
"""

from __future__ import annotations

from types import MappingProxyType

import torch

from .suite import DraftBatch
from ..sampling.kernels import Drafts, Rows, TreeSpeculative, residual


def kernel_sampler(kernel: TreeSpeculative):
    """Conformance sampler (``(DraftBatch, generator) -> (tokens, num_emitted)``) running ``kernel``
    on every draft, chains included (the production chain fast path is bypassed)."""

    def run(batch: DraftBatch, generator: torch.Generator):
        sizes = batch.sizes.long()
        d = Drafts(batch.tokens.long(), batch.parents.long(), sizes, batch.deterministic.bool(),
                   Rows(batch.target_probs), Rows(batch.draft_probs), sizes.tolist())
        out = kernel(d, int(batch.target_probs.shape[2]), generator)
        return out.tokens, out.num_accepted + 1

    return run


class AlwaysAccept(TreeSpeculative):
    """Accepts every drafted token (emits the drafter's law, not the target's)."""

    def accept(self, u, p, p_mass, x, q_x):
        return torch.ones_like(u, dtype=torch.bool)


class RatioInverted(TreeSpeculative):
    """Accepts with ``min(1, q/p)`` instead of ``min(1, p/q)``."""

    def accept(self, u, p, p_mass, x, q_x):
        p_x = p.gather(1, x.unsqueeze(1)).squeeze(1).double() / p_mass.double()
        return u * p_x < q_x


class AcceptIfTargetAtLeastDraft(TreeSpeculative):
    """Deterministic threshold: accepts iff ``p(x) >= q(x)`` (no coin flip)."""

    def accept(self, u, p, p_mass, x, q_x):
        return p.gather(1, x.unsqueeze(1)).squeeze(1).double() / p_mass.double() >= q_x


class GreedyOnDeterministic(TreeSpeculative):
    """Accepts a point-mass (deterministic) draft iff it is the target argmax, as greedy would."""

    def accept(self, u, p, p_mass, x, q_x):
        point_mass = q_x >= 1
        greedy = x == p.argmax(1)
        return torch.where(point_mass, greedy, super().accept(u, p, p_mass, x, q_x))


class SlightlyInflatedRatio(TreeSpeculative):
    """Accepts with ``min(1, 1.02 p/q)``: a target row whose mass is 1.02 (stale normalisation).
    The subtlest mutant: a 2 % error in one factor of the acceptance test."""

    def accept(self, u, p, p_mass, x, q_x):
        return super().accept(u, p * 1.02, p_mass, x, q_x)


class ResampleFromTarget(TreeSpeculative):
    """After a rejection draws from ``p`` again instead of ``norm(max(0, p - q))``."""

    def after_rejection(self, p, p_mass, q):
        return p, p_mass


class AbsResidual(TreeSpeculative):
    """Residual ``|p - q|`` (the ``max(0, .)`` forgotten, sign fixed by ``abs``)."""

    def after_rejection(self, p, p_mass, q):
        r = (p - p_mass.unsqueeze(1) * q).abs()
        return r, r.sum(1)


class UnnormalisedResidual(TreeSpeculative):
    """Uses ``max(0, p - q)`` without renormalising it in the next sibling's acceptance test."""

    def after_rejection(self, p, p_mass, q):
        r, _ = residual(p, p_mass, q)
        return r, torch.ones_like(p_mass)


class SiblingResidualNotUpdated(TreeSpeculative):
    """Tests every sibling against the parent's original ``p`` and only subtracts the *last* rejected
    sibling's ``q`` before the final draw (correct on chains, wrong with two or more siblings)."""

    def after_rejection(self, p, p_mass, q):
        return p, p_mass

    def final_distribution(self, d, p, p_mass, last_node, last_accepted, vocab):
        B = p.shape[0]
        ar = torch.arange(B, device=p.device)
        rejected = (last_node >= 0) & ~last_accepted
        q = d.q_rows(ar, torch.where(rejected, last_node, torch.full_like(last_node, -1)), vocab, p.dtype)
        r, _ = residual(p, p_mass, q)
        return r


class BonusFromDraft(TreeSpeculative):
    """After accepting a leaf, draws the bonus token from that node's draft ``q`` instead of the
    target row after it."""

    def final_distribution(self, d, p, p_mass, last_node, last_accepted, vocab):
        ar = torch.arange(p.shape[0], device=p.device)
        q = d.q_rows(ar, torch.where(last_accepted, last_node, torch.full_like(last_node, -1)), vocab, p.dtype)
        return torch.where(last_accepted.unsqueeze(1), q, p)


class BonusRowOffByOne(TreeSpeculative):
    """After accepting a leaf, draws the bonus token from the target row of the leaf's *parent*."""

    def final_distribution(self, d, p, p_mass, last_node, last_accepted, vocab):
        ar = torch.arange(p.shape[0], device=p.device)
        node = last_node.clamp(min=0)
        parent_row = d.parents[ar, node] + 1 if d.parents.shape[1] else torch.zeros_like(node)
        row = d.target.rows(ar, parent_row).to(p.dtype)
        return torch.where(last_accepted.unsqueeze(1), row, p)


MUTANTS: "MappingProxyType[str, type[TreeSpeculative]]" = MappingProxyType({
    "always_accept": AlwaysAccept,
    "ratio_q_over_p": RatioInverted,
    "accept_if_p_ge_q": AcceptIfTargetAtLeastDraft,
    "ratio_inflated_2pct": SlightlyInflatedRatio,
    "greedy_on_deterministic": GreedyOnDeterministic,
    "resample_from_target": ResampleFromTarget,
    "residual_abs_not_clamped": AbsResidual,
    "residual_not_renormalised": UnnormalisedResidual,
    "sibling_residual_not_updated": SiblingResidualNotUpdated,
    "bonus_from_draft_q": BonusFromDraft,
    "bonus_row_off_by_one": BonusRowOffByOne,
})
"""Name -> mutant class (read-only); build a sampler with ``kernel_sampler(cls())``."""
