"""Exact verification of draft trees: the rejection sampler.

Target row 0 is the distribution after the committed prefix, row ``i + 1`` after node ``i``; the result
is the accepted path and the emitted tokens (accepted drafts, then one bonus or recovery token). For
every ``exact`` :class:`Rule` the emitted tokens have exactly the law of drawing from the target rows
one at a time, provided each sampled node was drawn from its ``draft_probs`` row independently of the
target's randomness (docs/exactness.md; :mod:`specdec.conformance` tests it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

import torch

from .params import SamplingParams
from ..checks import check_distributions
from .kernels import (Drafts, Outcome, Rows, TreeSpeculative, chain_speculative, checked_argmax, greedy_verify,
                      greedy_walk)
from ..tree import DraftTree, pack_trees


class Rule(enum.Enum):
    """Acceptance rules. ``exact`` says whether the rule preserves the target distribution."""

    GREEDY = ("greedy", True, "target argmax; drafts accepted while they equal it (temperature 0)")
    CHAIN = (
        "chain",
        True,
        "Leviathan/Chen speculative sampling: accept min(1, p/q), residual norm(max(0, p - q)), bonus from p",
    )
    TREE_SAMPLED = ("tree_sampled", True, "SpecInfer multi-step speculative sampling over siblings drawn from their q")
    TREE_DETERMINISTIC = ("tree_deterministic", True, "point-mass siblings: accept with p(x), residual removes x")
    TREE_MIXED = ("tree_mixed", True, "sampled and deterministic siblings, each tested with its own q")

    def __init__(self, label: str, exact: bool, summary: str):
        self.label = label
        self.exact = exact
        self.summary = summary

    def __repr__(self) -> str:
        return f"Rule.{self.name}(exact={self.exact})"


@dataclass(frozen=True)
class AcceptResult:
    """One draft's outcome: ``tokens`` long ``[k + 1]`` (``k`` accepted drafts, then bonus or recovery),
    ``path`` long ``[k]`` (accepted nodes, root to leaf), ``rule``."""

    tokens: torch.Tensor
    path: torch.Tensor
    rule: Rule

    @property
    def num_accepted(self) -> int:
        return int(self.path.numel())


@dataclass(frozen=True)
class BatchAcceptResult:
    """Padded outcome of ``B`` drafts: ``tokens`` long ``[B, N + 1]`` (``-1`` after the
    ``num_accepted + 1`` real ones), ``path`` long ``[B, N]`` (``-1`` padded), ``num_accepted`` long
    ``[B]``, ``rules`` per request."""

    tokens: torch.Tensor
    path: torch.Tensor
    num_accepted: torch.Tensor
    rules: tuple[Rule, ...]

    def unbind(self) -> list[AcceptResult]:
        """One :class:`AcceptResult` per request (one device sync for the counts)."""
        ks = self.num_accepted.tolist()
        return [AcceptResult(self.tokens[b, : k + 1], self.path[b, :k], self.rules[b]) for b, k in enumerate(ks)]


def _resolve_rule(rule) -> bool:
    """True for the greedy rule, False for the speculative family; anything else is refused."""
    if rule in ("greedy", Rule.GREEDY):
        return True
    if rule in ("auto", "speculative") or (isinstance(rule, Rule) and rule is not Rule.GREEDY):
        return False
    raise ValueError(f"rule must be 'auto', 'greedy' or a specdec.sampling.Rule, got {rule!r}")


def _classify(greedy: bool, chain: list[bool], sampled: list[bool], det: list[bool], requested) -> tuple[Rule, ...]:
    rules = []
    for b, (is_chain, s, d) in enumerate(zip(chain, sampled, det)):
        if greedy:
            r = Rule.GREEDY
        elif is_chain:
            r = Rule.CHAIN
        else:
            r = Rule.TREE_MIXED if (s and d) else Rule.TREE_SAMPLED if s else Rule.TREE_DETERMINISTIC
        if isinstance(requested, Rule) and requested is not r and not greedy:
            raise ValueError(f"rule={requested.name} was requested but draft {b} needs {r.name}")
        rules.append(r)
    return tuple(rules)


def _greedy_argmax(scores: torch.Tensor, rows: torch.Tensor | None, validate: bool, name: str) -> torch.Tensor:
    """Greedy reads only the argmax: logits (with -inf masks) or probabilities both work."""
    return checked_argmax(scores, rows, name) if validate else scores.argmax(-1)


def _check_trees(trees: Sequence[DraftTree], batch, vocab: int) -> None:
    """What a DraftTree cannot know alone: its ids against this vocabulary, and q rows for sampled nodes."""
    for b, t in enumerate(trees):
        if t.vocab_size is not None and t.vocab_size != vocab:
            raise ValueError(f"trees[{b}] has vocab_size {t.vocab_size} but target_probs has V={vocab}")
    out_of_vocab = batch.valid & (batch.tokens >= vocab)
    if bool(out_of_vocab.any()):
        b, i = out_of_vocab.nonzero()[0].tolist()
        raise ValueError(f"trees[{b}] token {int(batch.tokens[b, i])} at node {i} is out of vocabulary (V={vocab})")
    sampled = (~batch.deterministic).any(1).tolist()
    for b, t in enumerate(trees):
        if sampled[b] and t.draft_probs is None:
            raise ValueError(f"trees[{b}] has sampled (non-deterministic) nodes but no draft_probs")


def _verify(
    trees: Sequence[DraftTree], batch, target, vocab: int, argmax: torch.Tensor | None, generator, rule="auto"
) -> tuple[Outcome, tuple[Rule, ...]]:
    """The kernels on packed, already checked drafts; ``argmax`` (``[B, N + 1]``) given = greedy."""
    greedy = argmax is not None
    chains = [t.is_chain for t in trees]
    rules = _classify(
        greedy,
        chains,
        (~batch.deterministic).any(1).tolist(),
        (batch.deterministic & batch.valid).any(1).tolist(),
        rule,
    )
    has_q = any(t.draft_probs is not None for t in trees)
    d = Drafts(
        batch.tokens,
        batch.parents.long(),
        batch.sizes.long(),
        batch.deterministic,
        Rows(target),
        Rows([t.draft_probs for t in trees]) if has_q else None,
        [t.num_nodes for t in trees],
    )
    return _run(d, vocab, greedy, all(chains), argmax, generator), rules


def _run(d: Drafts, vocab: int, greedy: bool, all_chains: bool, argmax, generator) -> Outcome:
    if greedy:
        return greedy_verify(d, argmax, all_chains)
    if all_chains:
        return chain_speculative(d, vocab, generator)
    return TreeSpeculative()(d, vocab, generator)


def rejection_sample_batch(
    trees: Sequence[DraftTree],
    target_probs: torch.Tensor | Sequence[torch.Tensor],
    *,
    generator: torch.Generator | None = None,
    rule="auto",
    validate: bool = True,
) -> list[AcceptResult]:
    """Verify ``B`` drafts at once.

    Args:
        trees: ``B`` :class:`~specdec.DraftTree` (any sizes, empty allowed).
        target_probs: processed probabilities (:func:`specdec.process_logits`; logits for greedy),
            ``[B, R >= max(n_b) + 1, V]`` (padding rows never read) or ``[n_b + 1, V]`` per tree.
        generator: every random draw (seeded: bit-identical). ``rule``: ``"auto"`` (per tree from its
            structure), ``"greedy"`` / ``Rule.GREEDY``, or a :class:`Rule` every tree must match.
        validate: check the rows are distributions (greedy: no NaN, ``+inf`` or all-``-inf`` row).

    Raises:
        ValueError: shape, vocabulary or device mismatches, bad rows, a sampled node without ``draft_probs``.
    """
    greedy = _resolve_rule(rule)
    trees = list(trees)
    if not trees:
        raise ValueError("rejection_sample_batch needs at least one DraftTree")
    for b, t in enumerate(trees):
        if not isinstance(t, DraftTree):
            raise TypeError(f"trees[{b}] is a {type(t).__name__}, expected DraftTree")
    sizes = [t.num_nodes for t in trees]
    N = max(sizes)
    if isinstance(target_probs, torch.Tensor):
        if target_probs.dim() != 3 or target_probs.shape[0] != len(trees) or target_probs.shape[1] < N + 1:
            raise ValueError(
                f"target_probs must have shape [B={len(trees)}, R >= max nodes + 1 = {N + 1}, V], "
                f"got {tuple(target_probs.shape)}"
            )
        vocab = int(target_probs.shape[2])
        devices = {target_probs.device}
    else:
        target_probs = list(target_probs)
        if len(target_probs) != len(trees):
            raise ValueError(f"got {len(target_probs)} target_probs tensors for {len(trees)} trees")
        for b, (t, n) in enumerate(zip(target_probs, sizes)):
            if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[0] != n + 1:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"target_probs[{b}] must have shape [n + 1 = {n + 1}, V], got {shape}")
        vocab = int(target_probs[0].shape[1])
        for b, t in enumerate(target_probs):
            if int(t.shape[1]) != vocab:
                raise ValueError(f"target_probs[{b}] has V={int(t.shape[1])} but target_probs[0] has V={vocab}")
        devices = {t.device for t in target_probs}
    devices |= {t.device for t in trees}
    if len(devices) > 1:
        raise ValueError(f"trees and target_probs are on different devices: {sorted(str(x) for x in devices)}")
    batch = pack_trees(trees)
    _check_trees(trees, batch, vocab)
    argmax = None
    if greedy and isinstance(target_probs, torch.Tensor):
        argmax = _greedy_argmax(target_probs, batch.sizes.long() + 1, validate, "target_probs")
    elif greedy:
        pad = torch.nn.utils.rnn.pad_sequence
        argmax = pad(
            [_greedy_argmax(t, None, validate, f"target_probs[{b}]") for b, t in enumerate(target_probs)],
            batch_first=True,
        )
    elif validate and isinstance(target_probs, torch.Tensor):
        rows = torch.arange(target_probs.shape[1], device=batch.sizes.device).unsqueeze(0) <= batch.sizes.unsqueeze(1)
        check_distributions(target_probs, rows, "target_probs")
    elif validate:
        for b, t in enumerate(target_probs):
            check_distributions(t, None, f"target_probs[{b}]")
    out, rules = _verify(trees, batch, target_probs, vocab, argmax, generator, rule)
    return BatchAcceptResult(out.tokens, out.path, out.num_accepted, rules).unbind()


def rejection_sample(
    tree: DraftTree,
    target_probs: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    rule="auto",
    validate: bool = True,
) -> AcceptResult:
    """Verify one draft. ``target_probs: [n + 1, V]`` (see :func:`rejection_sample_batch`)."""
    if not isinstance(target_probs, torch.Tensor) or target_probs.dim() != 2:
        shape = tuple(target_probs.shape) if isinstance(target_probs, torch.Tensor) else type(target_probs).__name__
        raise ValueError(f"target_probs must have shape [n + 1, V], got {shape}")
    if target_probs.shape[0] != tree.num_nodes + 1:
        raise ValueError(
            f"target_probs has {target_probs.shape[0]} rows but the tree has {tree.num_nodes} nodes: "
            f"expected n + 1 = {tree.num_nodes + 1} rows (row 0 after the prefix, row i + 1 after node i)"
        )
    return rejection_sample_batch([tree], [target_probs], generator=generator, rule=rule, validate=validate)[0]


def rejection_sample_padded(
    tokens: torch.Tensor,
    parents: torch.Tensor,
    sizes: torch.Tensor,
    target_probs: torch.Tensor,
    *,
    draft_probs: torch.Tensor | None = None,
    deterministic: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    rule="auto",
    validate: bool = True,
) -> BatchAcceptResult:
    """Verify ``B`` padded drafts without DraftTree objects: ``tokens`` long ``[B, N]``, ``parents``
    ``[B, N]`` (``-1`` = root, ``< i``), ``sizes`` ``[B]`` (entries beyond are padding, never read),
    ``target_probs`` ``[B, R >= N + 1, V]``, ``draft_probs`` ``[B, N, V]`` or None, ``deterministic``
    bool ``[B, N]`` (default all True without ``draft_probs``, else all False). ``validate`` checks
    structure and distributions; turn it off only for trusted inputs."""
    greedy = _resolve_rule(rule)
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape [B, N], got {tuple(tokens.shape)}")
    B, N = tokens.shape
    dev = tokens.device
    if deterministic is None:
        deterministic = torch.full((B, N), draft_probs is None, dtype=torch.bool, device=dev)
    if parents.shape != (B, N) or sizes.shape != (B,) or deterministic.shape != (B, N):
        raise ValueError(
            f"parents {tuple(parents.shape)} / deterministic {tuple(deterministic.shape)} must be [B, N] = "
            f"{[B, N]} and sizes {tuple(sizes.shape)} must be [B]"
        )
    if target_probs.dim() != 3 or target_probs.shape[0] != B or target_probs.shape[1] < N + 1:
        raise ValueError(
            f"target_probs must have shape [B={B}, R >= N + 1 = {N + 1}, V], got {tuple(target_probs.shape)}"
        )
    vocab = int(target_probs.shape[2])
    if draft_probs is not None and (
        draft_probs.dim() != 3 or draft_probs.shape[:2] != (B, N) or draft_probs.shape[2] != vocab
    ):
        raise ValueError(f"draft_probs must have shape [B={B}, N={N}, V={vocab}], got {tuple(draft_probs.shape)}")
    sizes = sizes.long()
    valid = torch.arange(N, device=dev).unsqueeze(0) < sizes.unsqueeze(1)
    # Padding entries may hold anything (e.g. -1): neutralise them so no gather ever reads them.
    parents = torch.where(valid, parents.long(), -1)
    tokens = torch.where(valid, tokens.long(), 0)
    det = deterministic.bool() | ~valid
    if validate:
        _validate_padded(tokens, parents, sizes, det, valid, draft_probs, vocab)
        if not greedy:
            rows = torch.arange(target_probs.shape[1], device=dev).unsqueeze(0) <= sizes.unsqueeze(1)
            check_distributions(target_probs, rows, "target_probs")
    idx = torch.arange(N, device=dev).unsqueeze(0)
    is_chain = ((parents == idx - 1) | ~valid).all(1)
    sampled_any = (~det).any(1)
    det_any = (det & valid).any(1)
    rules = _classify(greedy, is_chain.tolist(), sampled_any.tolist(), det_any.tolist(), rule)
    d = Drafts(
        tokens,
        parents,
        sizes,
        det,
        Rows(target_probs),
        None if draft_probs is None else Rows(draft_probs),
        sizes.tolist(),
    )
    argmax = _greedy_argmax(target_probs, sizes + 1, validate, "target_probs") if greedy else None
    out = _run(d, vocab, greedy, bool(is_chain.all()), argmax, generator)
    return BatchAcceptResult(out.tokens, out.path, out.num_accepted, rules)


def _validate_padded(tokens, parents, sizes, det, valid, draft_probs, vocab) -> None:
    B, N = tokens.shape
    if bool(((sizes < 0) | (sizes > N)).any()):
        raise ValueError(f"sizes must lie in [0, N={N}], got {sizes.tolist()}")
    idx = torch.arange(N, device=tokens.device).unsqueeze(0)
    bad = valid & ((parents >= idx) | (parents < -1))
    if bool(bad.any()):
        b, i = bad.nonzero()[0].tolist()
        raise ValueError(
            f"parents[{b}, {i}] = {int(parents[b, i])}: must be -1 (root) or an earlier node index (< {i})"
        )
    bad = valid & ((tokens < 0) | (tokens >= vocab))
    if bool(bad.any()):
        b, i = bad.nonzero()[0].tolist()
        raise ValueError(f"tokens[{b}, {i}] = {int(tokens[b, i])} is out of vocabulary [0, {vocab})")
    sampled = valid & ~det
    if not bool(sampled.any()):
        return
    if draft_probs is None:
        raise ValueError("some nodes are sampled (deterministic=False) but draft_probs is None")
    check_distributions(draft_probs, sampled, "draft_probs")
    own = draft_probs.gather(2, tokens.unsqueeze(2)).squeeze(2)
    bad = sampled & (own <= 0)
    if bool(bad.any()):
        b, i = bad.nonzero()[0].tolist()
        raise ValueError(f"node [{b}, {i}] is sampled but its draft_probs give its token probability 0")


def accept_logits(
    trees: Sequence[DraftTree],
    target_logits: torch.Tensor | Sequence[torch.Tensor],
    sampling: SamplingParams | None = None,
    *,
    generator: torch.Generator | None = None,
) -> list[AcceptResult]:
    """Verify drafts from raw target logits (``[B, R >= max(n_b) + 1, V]`` or ``[n_b + 1, V]`` per
    tree), every input checked. ``sampling`` None or temperature 0: greedy on the logits (bit parity
    with HF greedy search); else against ``sampling.process(logits)``."""
    if sampling is not None and not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a SamplingParams or None, got {type(sampling).__name__}")
    if sampling is None or sampling.greedy:
        return rejection_sample_batch(trees, target_logits, generator=generator, rule="greedy")
    if isinstance(target_logits, torch.Tensor):
        probs = sampling.process(target_logits)
    else:
        probs = [sampling.process(t) for t in target_logits]
    return rejection_sample_batch(trees, probs, generator=generator, validate=False)


def accept_step(
    trees: Sequence[DraftTree],
    logits: torch.Tensor,
    sampling: SamplingParams | None,
    *,
    generator: torch.Generator | None = None,
) -> tuple[list[list[int]], list[list[int]]]:
    """The engine's trusted path: ``(accepted node paths, emitted tokens)`` per request, as lists.

    ``trees`` and ``logits`` (float ``[B, R >= max(n_b) + 1, V]``) come from the decoder's verify, so
    only what a model can still get wrong is checked: a read row with NaN / ``+inf`` or nothing allowed.
    Same rules and kernels as :func:`rejection_sample_batch`.
    """
    if sampling is None or sampling.greedy:
        sizes = torch.tensor([1 + t.num_nodes for t in trees], device=logits.device)
        best = checked_argmax(logits, sizes).tolist()  # [B][R]
        walks = [greedy_walk(t.tokens.tolist(), t.children_of, row) for t, row in zip(trees, best)]
        return [w[0] for w in walks], [w[1] for w in walks]
    # Proposers may draft on the CPU while the target runs elsewhere: the kernels need one device.
    trees = [t if t.device == logits.device else t.to(logits.device) for t in trees]
    probs = sampling.process(logits)
    out, _ = _verify(trees, pack_trees(trees), probs, int(probs.shape[-1]), None, generator)
    k = out.num_accepted.tolist()
    return ([row[:n] for row, n in zip(out.path.tolist(), k)], [row[: n + 1] for row, n in zip(out.tokens.tolist(), k)])
