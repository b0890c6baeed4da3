"""Vectorised verification kernels (pure torch) behind :mod:`specdec.sampling`.

Inputs are ``B`` padded drafts (``tokens [B, N]``, ``parents [B, N]`` with ``-1`` = root, ``sizes [B]``,
``deterministic [B, N]``); target and draft rows come through :class:`Rows` (one padded tensor or one
tensor per request, no padding copy). Kernels: :func:`chain_speculative` (no loop over tokens),
:class:`TreeSpeculative` (one vectorised iteration per test, at most ``N + 1``; its steps are methods so
conformance mutants can override one) and :func:`greedy_verify` (:func:`greedy_walk`). All randomness is
``torch.rand`` on the given generator: seeded runs are bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch


class Rows:
    """Per-request row tables ``[B][R_b, V]`` from a padded ``[B, R, V]`` or ``B`` tensors ``[R_b, V]``
    (``None`` where no row is read)."""

    def __init__(self, data: torch.Tensor | Sequence[torch.Tensor | None]):
        self.padded = data if isinstance(data, torch.Tensor) else None
        self.items = None if isinstance(data, torch.Tensor) else list(data)

    def rows(self, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """``[k, V]``: row ``r[j]`` of request ``b[j]`` (``b, r``: LongTensor ``[k]``)."""
        if self.padded is not None:
            return self.padded[b, r]
        return torch.stack([self.items[bi][ri] for bi, ri in zip(b.tolist(), r.tolist())])

    def values(self, r: torch.Tensor, cols: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
        """``[B, N]``: entry ``(r[b, i], cols[b, i])`` of request ``b``; 0 for ``i >= sizes[b]`` and for
        requests whose table is ``None``."""
        if self.padded is not None:
            b = torch.arange(r.shape[0], device=r.device).unsqueeze(1)
            return self.padded[b, r, cols]
        out = torch.zeros(r.shape, dtype=torch.float64, device=r.device)
        for b, n in enumerate(sizes):
            if n and self.items[b] is not None:
                out[b, :n] = self.items[b][r[b, :n], cols[b, :n]].double()
        return out


@dataclass
class Drafts:
    """A padded batch of drafts plus its row sources (see the module docstring for shapes)."""

    tokens: torch.Tensor  # LongTensor[B, N]
    parents: torch.Tensor  # LongTensor[B, N]
    sizes: torch.Tensor  # LongTensor[B]
    deterministic: torch.Tensor  # BoolTensor[B, N] (True in padding)
    target: Rows  # [B][n_b + 1, V]
    draft: Rows | None  # [B][n_b, V], None when every node is deterministic
    size_list: list[int]

    @property
    def valid(self) -> torch.Tensor:
        """``BoolTensor[B, N]``: real (non-padding) nodes."""
        N = self.tokens.shape[1]
        return torch.arange(N, device=self.tokens.device).unsqueeze(0) < self.sizes.unsqueeze(1)

    def q_rows(self, b: torch.Tensor, node: torch.Tensor, vocab: int, dtype: torch.dtype) -> torch.Tensor:
        """``[k, V]`` draft distribution of node ``node[j]`` of request ``b[j]``: the stored row for a
        sampled node, the point mass on its token for a deterministic one, zeros when ``node < 0``."""
        k = b.shape[0]
        out = torch.zeros(k, vocab, dtype=dtype, device=b.device)
        if self.tokens.shape[1] == 0 or k == 0:
            return out
        has = node >= 0
        safe = node.clamp(min=0)
        det = self.deterministic[b, safe]
        point = (has & det).nonzero().squeeze(1)
        out[point, self.tokens[b[point], safe[point]]] = 1.0
        sampled = (has & ~det).nonzero().squeeze(1)
        if self.draft is not None and sampled.numel():
            out[sampled] = self.draft.rows(b[sampled], safe[sampled]).to(dtype)
        return out

    def q_at_token(self) -> torch.Tensor:
        """``float64 [B, N]``: q(token) of every node (1 for deterministic nodes and padding)."""
        ones = torch.ones(self.tokens.shape, dtype=torch.float64, device=self.tokens.device)
        if self.draft is None:
            return ones
        nodes = torch.arange(self.tokens.shape[1], device=self.tokens.device).expand_as(self.tokens)
        q = self.draft.values(nodes, self.tokens, self.size_list)
        return torch.where(self.deterministic, ones, q.double())


def sample_rows(weights: torch.Tensor, generator: torch.Generator | None, block: int = 256) -> torch.Tensor:
    """One draw per row of unnormalised non-negative ``weights [B, V]`` (positive mass): float64 inverse
    CDF with ``u = (1 - U) * total`` in ``(0, total]``, so a zero-weight index is never chosen. Large ``V``
    uses two levels (block sums, then one block): ``V / block + block`` work per row, same law."""
    B, V = weights.shape
    u = 1.0 - torch.rand(B, 1, dtype=torch.float64, device=weights.device, generator=generator)
    if V <= 16 * block:
        cdf = weights.double().cumsum(-1)
        return torch.searchsorted(cdf, u * cdf[:, -1:]).squeeze(1).clamp(max=V - 1)
    nb = -(-V // block)
    padded = weights if nb * block == V else torch.nn.functional.pad(weights, (0, nb * block - V))
    blocks = padded.view(B, nb, block)
    # float32 block sums (pairwise, relative error ~1e-7, below the float32 inputs' own rounding);
    # the chosen block is resolved exactly in float64.
    outer = blocks.sum(-1).double().cumsum(-1)  # [B, nb]
    target = u * outer[:, -1:]
    j = torch.searchsorted(outer, target).clamp(max=nb - 1)  # first block whose cdf reaches target
    before = torch.where(j > 0, outer.gather(1, (j - 1).clamp(min=0)), torch.zeros_like(target))
    inner = blocks[torch.arange(B, device=weights.device), j.squeeze(1)].double().cumsum(-1)  # [B, block]
    rest = torch.minimum(target - before, inner[:, -1:])  # > 0 because target > before
    i = torch.searchsorted(inner, rest).clamp(max=block - 1)
    return (j * block + i).squeeze(1)


def residual(p: torch.Tensor, p_mass: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unnormalised ``max(0, p - p_mass * q)`` and its mass, for ``p [k, V]`` of mass ``p_mass [k]``.
    A massless residual (``p == q`` up to rounding, rejection probability ``TV = 0`` exactly) returns
    ``p``, keeping the emitted law within a few ulps of ``p``."""
    r = torch.addcmul(p, q, p_mass.unsqueeze(1).to(p.dtype), value=-1).clamp_(min=0)  # one [k, V] allocation
    r_mass = r.sum(1)
    ok = r_mass > 0
    if bool(ok.all()):  # the usual case: skip a [k, V] select
        return r, r_mass
    return torch.where(ok.unsqueeze(1), r, p), torch.where(ok, r_mass, p_mass)


@dataclass
class Outcome:
    """Padded per-request result: ``tokens [B, N + 1]`` (-1 padded), ``path [B, N]`` (-1 padded),
    ``num_accepted [B]``."""

    tokens: torch.Tensor
    path: torch.Tensor
    num_accepted: torch.Tensor


def _assemble(d: Drafts, path: torch.Tensor, k: torch.Tensor, final: torch.Tensor) -> Outcome:
    """Emitted tokens = tokens along ``path`` (first ``k`` entries) + ``final``."""
    B, N = d.tokens.shape
    cols = torch.arange(N + 1, device=k.device).unsqueeze(0)
    safe = path.clamp(min=0)
    drafted = torch.cat([d.tokens.gather(1, safe), torch.zeros(B, 1, dtype=torch.long, device=k.device)], 1)
    kk = k.unsqueeze(1)
    tokens = torch.where(cols < kk, drafted, torch.where(cols == kk, final.unsqueeze(1), torch.full_like(drafted, -1)))
    return Outcome(tokens=tokens, path=torch.where(cols[:, :N] < kk, path, torch.full_like(path, -1)), num_accepted=k)


def chain_speculative(d: Drafts, vocab: int, generator: torch.Generator | None) -> Outcome:
    """Leviathan/Chen speculative sampling for chains: node ``i`` is accepted iff ``u_i * q_i(x_i) <
    p_i(x_i)``; after ``k`` leading acceptances the last token is drawn from ``norm(max(0, p_k - q_k))``
    (``k < n``) or ``p_n`` (bonus)."""
    B, N = d.tokens.shape
    dev = d.tokens.device
    ar = torch.arange(B, device=dev)
    rows = torch.arange(N, device=dev).unsqueeze(0).expand(B, N)
    valid = d.valid
    p_tok = d.target.values(rows, d.tokens, d.size_list).double()
    q_tok = d.q_at_token()
    u = torch.rand(B, N, dtype=torch.float64, device=dev, generator=generator)
    accept = (u * q_tok < p_tok) & valid
    k = accept.long().cumprod(1).sum(1)
    p = d.target.rows(ar, k)
    work = torch.float64 if p.dtype == torch.float64 else torch.float32
    p = p.to(work)
    node = torch.where(k < d.sizes, k, torch.full_like(k, -1))
    q = d.q_rows(ar, node, vocab, work)
    r, _ = residual(p, torch.ones(B, dtype=work, device=dev), q)
    final = sample_rows(r, generator)
    path = torch.arange(N, device=dev).unsqueeze(0).expand(B, N).clone()
    return _assemble(d, path, k, final)


def sibling_links(parents: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``first_child [B, N + 1]`` (column 0 = root, column ``i + 1`` = node ``i``) and
    ``next_sibling [B, N]``, both ``-1`` for none; siblings in node order; padding excluded."""
    B, N = parents.shape
    dev = parents.device
    idx = torch.arange(N, device=dev).unsqueeze(0).expand(B, N)
    valid = idx < sizes.unsqueeze(1)
    slot = torch.where(valid, parents.long() + 1, torch.full_like(idx, N + 1))  # N + 1 = "no parent"
    first = torch.full((B, N + 2), N, dtype=torch.long, device=dev)
    first.scatter_reduce_(1, slot, idx.contiguous(), reduce="amin")
    first = first[:, : N + 1]
    first = torch.where(first >= N, torch.full_like(first, -1), first)
    key = slot * (N + 1) + idx
    order = key.argsort(1)
    slot_sorted = slot.gather(1, order)
    nxt_sorted = torch.full_like(order, -1)
    if N > 1:
        same = (slot_sorted[:, 1:] == slot_sorted[:, :-1]) & (slot_sorted[:, :-1] <= N)
        nxt_sorted[:, :-1] = torch.where(same, order[:, 1:], torch.full_like(order[:, 1:], -1))
    nxt = torch.full_like(order, -1).scatter_(1, order, nxt_sorted)
    return first, nxt


class TreeSpeculative:
    """Multi-step speculative sampling over trees (sampled, deterministic or mixed siblings).

    Children are tried in node order against the working distribution ``p``: child ``c`` (token ``x``,
    draft row or point mass ``q_c``) is accepted with probability ``min(1, p(x) / q_c(x))`` and ``p``
    becomes the target row after ``c``; a rejection sets ``p = norm(max(0, p - q_c))``. With no child
    left the token is drawn from ``p``. Each step preserves the law ``p``, so every emitted token has
    the target's law (docs/exactness.md). Conformance mutants override single steps.
    """

    def __call__(self, d: Drafts, vocab: int, generator: torch.Generator | None) -> Outcome:
        B, N = d.tokens.shape
        dev = d.tokens.device
        ar = torch.arange(B, device=dev)
        first, nxt = sibling_links(d.parents, d.sizes)
        p = d.target.rows(ar, torch.zeros(B, dtype=torch.long, device=dev))
        work = torch.float64 if p.dtype == torch.float64 else torch.float32
        p = p.to(work).clone()
        p_mass = torch.ones(B, dtype=work, device=dev)  # target rows are validated distributions
        cand = first[:, 0].clone()
        k = torch.zeros(B, dtype=torch.long, device=dev)
        path = torch.full((B, N + 1), -1, dtype=torch.long, device=dev)
        last_node = torch.full((B,), -1, dtype=torch.long, device=dev)
        last_accepted = torch.zeros(B, dtype=torch.bool, device=dev)
        q_tok = d.q_at_token()
        for _ in range(N + 1):
            testing = cand >= 0
            if not bool(testing.any()):
                break
            c = cand.clamp(min=0)
            x = d.tokens[ar, c]
            u = torch.rand(B, dtype=torch.float64, device=dev, generator=generator)
            acc = testing & self.accept(u, p, p_mass, x, q_tok[ar, c])
            rej = testing & ~acc
            path[ar, k] = torch.where(acc, c, path[ar, k])
            k = k + acc.long()
            # Only rows whose state changes are touched: the cost per test is O(V) per request,
            # like the per-node loop, but one batched op for all requests.
            ri = rej.nonzero().squeeze(1)
            if ri.numel():
                p[ri], p_mass[ri] = self.after_rejection(p[ri], p_mass[ri], d.q_rows(ri, c[ri], vocab, work))
            ai = acc.nonzero().squeeze(1)
            if ai.numel():
                p[ai], p_mass[ai] = self.after_acceptance(d, ai, c[ai], work)
            last_node = torch.where(testing, c, last_node)
            last_accepted = torch.where(testing, acc, last_accepted)
            cand = torch.where(acc, first[ar, c + 1], torch.where(rej, nxt[ar, c], cand))
        final = sample_rows(self.final_distribution(d, p, p_mass, last_node, last_accepted, vocab), generator)
        return _assemble(d, path[:, :N], k, final)

    def accept(self, u: torch.Tensor, p: torch.Tensor, p_mass: torch.Tensor, x: torch.Tensor,
               q_x: torch.Tensor) -> torch.Tensor:
        """Accept token ``x [B]`` with probability ``min(1, (p(x) / p_mass) / q_x)``, i.e. iff
        ``u * q_x * p_mass < p(x)`` (``u [B]`` uniform in [0, 1), ``p [B, V]`` unnormalised)."""
        p_x = p.gather(1, x.unsqueeze(1)).squeeze(1).double()
        return u * q_x * p_mass.double() < p_x

    def after_rejection(self, p: torch.Tensor, p_mass: torch.Tensor, q: torch.Tensor):
        """Rejecting rows ``[k, V]``: ``max(0, p - q)`` and its mass, for the next sibling."""
        return residual(p, p_mass, q)

    def after_acceptance(self, d: Drafts, b: torch.Tensor, c: torch.Tensor, work: torch.dtype):
        """After request ``b[j]`` accepted node ``c[j]``: the target row after it (``[k, V]``), mass 1."""
        row = d.target.rows(b, c + 1).to(work)
        return row, torch.ones(b.shape[0], dtype=work, device=b.device)

    def final_distribution(
        self,
        d: Drafts,
        p: torch.Tensor,
        p_mass: torch.Tensor,
        last_node: torch.Tensor,
        last_accepted: torch.Tensor,
        vocab: int,
    ) -> torch.Tensor:
        """Weights ``[B, V]`` of the emitted token: ``p`` (``last_node`` / ``last_accepted`` are for mutants)."""
        return p


def checked_argmax(scores: torch.Tensor, rows: torch.Tensor | None = None, name: str = "target logits") -> torch.Tensor:
    """Argmax over the last dim of ``[B, V]`` or ``[B, R, V]`` scores; ValueError for a read row with
    NaN or ``+inf``, or ``-inf`` everywhere. ``rows[b]`` limits the check to request ``b``'s first rows
    (the rest is padding)."""
    best = scores.argmax(-1)
    chosen = scores.gather(-1, best.unsqueeze(-1)).squeeze(-1)
    read = None
    if rows is not None:
        read = torch.arange(scores.shape[1], device=scores.device).unsqueeze(0) < rows.unsqueeze(1)
    for bad, what in (
        (
            torch.isnan(chosen) | (chosen == float("inf")),
            "contains NaN or +inf: the target produced NaN logits or invalid scores",
        ),
        (chosen == float("-inf"), "is -inf everywhere: no token is allowed"),
    ):
        if read is not None:
            bad = bad & read
        if bool(bad.any()):
            raise ValueError(f"{name} row {bad.nonzero()[0].tolist()} {what}; greedy decoding cannot choose a token")
    return best


def greedy_walk(
    tokens: Sequence[int], children_of: Callable[[int], Sequence[int]], best: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Greedy rule on one tree: follow the first child whose token is the argmax after its parent
    (``best[0]`` after the root, ``best[1 + i]`` after node ``i``), else emit that argmax. Returns
    ``(node path, path tokens + one target token)``."""
    path, emitted, node = [], [], -1
    while True:
        want = best[0 if node < 0 else 1 + node]
        emitted.append(want)
        child = next((c for c in children_of(node) if tokens[c] == want), None)
        if child is None:
            return path, emitted
        path.append(child)
        node = child


def greedy_replay(tokens: Sequence[int], parents: Sequence[int], truth: Sequence[int]) -> list[int]:
    """:func:`greedy_walk` against a recorded greedy answer ``truth`` (``truth[d]`` follows a
    depth-``d`` path), for replays; returns the accepted node path."""
    depth: list[int] = []
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        depth.append(0 if p < 0 else depth[p] + 1)
        kids.setdefault(p, []).append(i)
    after = [truth[d] if d < len(truth) else -1 for d in [0] + [x + 1 for x in depth]]  # -1 matches no token
    return greedy_walk(tokens, lambda node: kids.get(node, ()), after)[0]


def greedy_verify(d: Drafts, argmax: torch.Tensor, chain: bool) -> Outcome:
    """:func:`greedy_walk` over a padded batch, ``argmax`` long ``[B, N + 1]``; ``chain=True`` (all
    chains) is loop-free, trees walk on the host after one sync."""
    B, N = d.tokens.shape
    dev = d.tokens.device
    if chain:
        accept = (d.tokens == argmax[:, :N]) & d.valid
        k = accept.long().cumprod(1).sum(1)
        return _assemble(d, torch.arange(N, device=dev).expand(B, N), k, argmax[torch.arange(B, device=dev), k])
    tokens, parents, best = d.tokens.tolist(), d.parents.tolist(), argmax.tolist()
    path = torch.full((B, N), -1, dtype=torch.long)
    k = torch.zeros(B, dtype=torch.long)
    final = torch.zeros(B, dtype=torch.long)
    for b, n in enumerate(d.size_list):
        kids: dict[int, list[int]] = {}
        for i in range(n):
            kids.setdefault(parents[b][i], []).append(i)
        p, emitted = greedy_walk(tokens[b], lambda node: kids.get(node, ()), best[b])
        path[b, : len(p)] = torch.tensor(p, dtype=torch.long)
        k[b], final[b] = len(p), emitted[-1]
    return _assemble(d, path.to(dev), k.to(dev), final.to(dev))
