"""DraftTree: one request's speculative draft, as flat token / parent arrays.

Flat because every consumer wants flat arrays (verify forward, tree-attention op, sampler); parents
precede children, and a chain has parents ``[-1, 0, 1, ...]``. Exact verification needs how each node
was drafted: chosen (``deterministic``, a point mass) or sampled from ``draft_probs[i]`` independently
of its siblings. :func:`pack_trees` pads trees into a :class:`TreeBatch` whose padding is never read.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch

from .checks import check_distributions, prob_tolerance

_WORD_BITS = 64


def _to_signed64(word: int) -> int:
    """Reinterpret an unsigned 64-bit Python int as a two's-complement int64 value."""
    return word - (1 << 64) if word >= (1 << 63) else word


def _index_tensor(values, empty_dtype: torch.dtype, device=None) -> torch.Tensor:
    """Tensors pass through; sequences keep their inferred dtype, an empty one gets ``empty_dtype``."""
    if isinstance(values, torch.Tensor):
        return values
    t = torch.as_tensor(values, device=device)
    return t.to(empty_dtype) if t.numel() == 0 else t


class DraftTree:
    """A draft tree of ``n`` nodes for one request.

    Args:
        tokens: integer tensor ``[n]``, the drafted token ids.
        parents: integer tensor ``[n]``; ``-1`` = child of the last committed token, otherwise the
            index of an earlier node (``-1 <= parents[i] < i``).
        draft_probs: float tensor ``[n, V]`` or None: row ``i`` is the distribution node ``i`` was
            sampled from; a deterministic node's row is a point mass on its token or all zeros.
        deterministic: bool tensor ``[n]``; default all True without ``draft_probs``, else all False.
        vocab_size: ids must lie in ``[0, V)``; taken from ``draft_probs`` when given (must agree).
        validate: check the invariants (internal constructors of valid-by-construction trees skip it).

    Raises:
        ValueError: naming the first problem found (shape, parent order, vocabulary, not a
            distribution, mixed devices, ...).
    """

    __slots__ = ("tokens", "parents", "draft_probs", "deterministic", "vocab_size", "__dict__")

    def __init__(
        self,
        tokens,
        parents,
        draft_probs: torch.Tensor | None = None,
        deterministic=None,
        *,
        vocab_size: int | None = None,
        validate: bool = True,
    ):
        tokens = _index_tensor(tokens, torch.long)
        # Tensors keep their device (a mismatch is an error below); lists follow the tokens.
        if not isinstance(parents, torch.Tensor):
            parents = _index_tensor(parents, torch.int32, tokens.device)
        if deterministic is None:
            make = torch.ones if draft_probs is None else torch.zeros  # cheaper than torch.full on the hot path
            deterministic = make(tokens.shape, dtype=torch.bool, device=tokens.device)
        elif not isinstance(deterministic, torch.Tensor):
            deterministic = torch.as_tensor(deterministic, device=tokens.device)
        if validate:
            vocab_size = _validate(tokens, parents, draft_probs, deterministic, vocab_size)
        elif draft_probs is not None and vocab_size is None:
            vocab_size = int(draft_probs.shape[1])
        self.tokens = tokens if tokens.dtype == torch.long else tokens.long()
        self.parents = parents if parents.dtype == torch.int32 else parents.int()
        self.draft_probs = draft_probs
        self.deterministic = deterministic if deterministic.dtype == torch.bool else deterministic.bool()
        self.vocab_size = vocab_size

    # ------------------------------------------------------------------ constructors
    @classmethod
    def chain(cls, tokens, draft_probs: torch.Tensor | None = None, deterministic=None, *, vocab_size=None):
        """A chain ``t0 -> t1 -> ...``: parents ``[-1, 0, 1, ...]``."""
        tokens = _index_tensor(tokens, torch.long)
        parents = torch.arange(-1, tokens.numel() - 1, dtype=torch.int32, device=tokens.device)
        return cls(tokens, parents, draft_probs, deterministic, vocab_size=vocab_size)

    @classmethod
    def trusted(cls, tokens: torch.Tensor, parents: torch.Tensor, deterministic: torch.Tensor,
                draft_probs: torch.Tensor | None = None, *, vocab_size: int | None = None) -> "DraftTree":
        """No checks, conversions or copies, for hot paths. The caller guarantees ``tokens`` int64
        ``[n]``, ``parents`` int32 ``[n]`` with ``-1 <= parents[i] < i``, ``deterministic`` bool
        ``[n]``, ids in the vocabulary, one device."""
        tree = object.__new__(cls)
        tree.tokens = tokens
        tree.parents = parents
        tree.draft_probs = draft_probs
        tree.deterministic = deterministic
        tree.vocab_size = vocab_size
        return tree

    @classmethod
    def empty(cls, device=None, vocab_size: int | None = None):
        """A tree with no nodes: the proposer has nothing worth drafting this step."""
        return cls(
            torch.zeros(0, dtype=torch.long, device=device),
            torch.zeros(0, dtype=torch.int32, device=device),
            vocab_size=vocab_size,
        )

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]], *, vocab_size: int | None = None):
        """A deterministic trie of the token paths (shared prefixes merged), nodes in insertion
        order (siblings keep the paths' order, which the sampler tries in)."""
        tokens: list[int] = []
        parents: list[int] = []
        index: dict[tuple[int, int], int] = {}
        for path in paths:
            parent = -1
            for tok in path:
                key = (parent, int(tok))
                if key not in index:
                    index[key] = len(tokens)
                    tokens.append(int(tok))
                    parents.append(parent)
                parent = index[key]
        return cls(
            torch.tensor(tokens, dtype=torch.long),
            torch.tensor(parents, dtype=torch.int32),
            vocab_size=vocab_size,
        )

    # ------------------------------------------------------------------ basics
    @property
    def num_nodes(self) -> int:
        return int(self.tokens.numel())

    def __len__(self) -> int:
        return self.num_nodes

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def to(self, device) -> "DraftTree":
        """A copy on ``device`` (validation is not repeated: the tree is already valid)."""
        probs = None if self.draft_probs is None else self.draft_probs.to(device)
        return DraftTree(
            self.tokens.to(device),
            self.parents.to(device),
            probs,
            self.deterministic.to(device),
            vocab_size=self.vocab_size,
            validate=False,
        )

    def select(self, nodes: Sequence[int]) -> "DraftTree":
        """The sub-tree of the given node indices (increasing, closed under parents), re-indexed in
        that order, with their draft rows and kinds. Raises ValueError for a node kept without its
        parent."""
        new_index = {old: new for new, old in enumerate(nodes)}
        parents = []
        for old in nodes:
            p = self.parent_list[old]
            if p >= 0 and p not in new_index:
                raise ValueError(f"DraftTree.select: node {old} kept without its parent {p}")
            parents.append(-1 if p < 0 else new_index[p])
        idx = torch.tensor(list(nodes), dtype=torch.long, device=self.device)
        probs = None if self.draft_probs is None else self.draft_probs[idx]
        return DraftTree(self.tokens[idx], torch.tensor(parents, dtype=torch.int32, device=self.device), probs,
                         self.deterministic[idx], vocab_size=self.vocab_size, validate=False)

    def __repr__(self) -> str:
        return (
            f"DraftTree(n={self.num_nodes}, tokens={self.tokens.tolist()}, parents={self.parents.tolist()}, "
            f"sampled={int((~self.deterministic).sum())})"
        )

    @property
    def is_chain(self) -> bool:
        """True when every node's parent is the node before it."""
        return self.parent_list == list(range(-1, self.num_nodes - 1))

    # ------------------------------------------------------------------ derived, cached
    @functools.cached_property
    def parent_list(self) -> list[int]:
        """:attr:`parents` as a list of Python ints (host-side bookkeeping, no device sync)."""
        return self.parents.tolist()

    @functools.cached_property
    def depth(self) -> torch.Tensor:
        """``LongTensor[n]``: 1 for children of the root, parent's depth + 1 otherwise."""
        return torch.tensor(self.depth_list, dtype=torch.long, device=self.device)

    @functools.cached_property
    def depth_list(self) -> list[int]:
        """:attr:`depth` as a list of Python ints (what host-side bookkeeping reads, no device sync)."""
        depth: list[int] = []
        for p in self.parent_list:
            depth.append(1 if p < 0 else depth[p] + 1)
        return depth

    @property
    def max_depth(self) -> int:
        return max(self.depth_list, default=0)

    def cut(self, max_depth: int) -> tuple["DraftTree", list[int] | None]:
        """``(nodes at depth <= max_depth, their indices in self)``; ``(self, None)`` when none is deeper.
        The cut depends on depth only, never tokens, so a cut sampled tree stays exact; the one rule for
        every depth limit (the model's last position, the tokens a request has left)."""
        if max_depth >= self.max_depth:
            return self, None
        keep = [i for i, d in enumerate(self.depth_list) if d <= max_depth]
        return self.select(keep), keep

    @functools.cached_property
    def position_offsets(self) -> torch.Tensor:
        """``LongTensor[n]``: ``depth - 1``; with ``L`` committed tokens node ``i`` is at ``L + offset``."""
        return self.depth - 1

    @functools.cached_property
    def children(self) -> list[list[int]]:
        """``children[i]``: node indices whose parent is ``i``, in node order (the root is ``-1``,
        so root children are in :attr:`root_children`)."""
        kids: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for i, p in enumerate(self.parent_list):
            if p >= 0:
                kids[p].append(i)
        return kids

    @functools.cached_property
    def root_children(self) -> list[int]:
        return [i for i, p in enumerate(self.parent_list) if p < 0]

    def children_of(self, node: int) -> list[int]:
        """Children of ``node``, where ``node = -1`` is the root."""
        return self.root_children if node < 0 else self.children[node]

    @functools.cached_property
    def paths(self) -> list[list[int]]:
        """Root-to-leaf paths as lists of node indices, one per leaf, in leaf order."""
        has_child = [False] * self.num_nodes
        for p in self.parent_list:
            if p >= 0:
                has_child[p] = True
        out = []
        for leaf in range(self.num_nodes):
            if not has_child[leaf]:
                out.append(self.path_to(leaf))
        return out

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root's child down to ``node`` (inclusive)."""
        path = []
        parents = self.parent_list
        while node >= 0:
            path.append(node)
            node = parents[node]
        return path[::-1]

    @functools.cached_property
    def ancestor_mask(self) -> torch.Tensor:
        """``int64[n, ceil(n/64)]``: bit ``j`` (word ``j // 64``, bit ``j % 64``, two's complement) of
        row ``i`` is set when ``j == i`` or ``j`` is an ancestor of ``i``; the tree-attention op's input."""
        n = self.num_nodes
        words = (n + _WORD_BITS - 1) // _WORD_BITS
        sets: list[int] = []
        for i, p in enumerate(self.parent_list):
            sets.append((sets[p] if p >= 0 else 0) | (1 << i))
        full = (1 << _WORD_BITS) - 1
        rows = [[_to_signed64((s >> (_WORD_BITS * w)) & full) for w in range(words)] for s in sets]
        return torch.tensor(rows, dtype=torch.int64, device=self.device).reshape(n, words)

    @functools.cached_property
    def dense_ancestor_mask(self) -> torch.Tensor:
        """``bool[n, n]``: the unpacked :attr:`ancestor_mask` (for references and small trees)."""
        return unpack_mask(self.ancestor_mask, self.num_nodes)


def unpack_mask(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Unpack ``int64[..., W]`` bit words into ``bool[..., n]`` (bit j of word j // 64)."""
    shifts = torch.arange(_WORD_BITS, device=packed.device, dtype=torch.int64)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(*packed.shape[:-1], packed.shape[-1] * _WORD_BITS)[..., :n].bool()


def pack_mask(dense: torch.Tensor) -> torch.Tensor:
    """Pack ``bool[..., n]`` into ``int64[..., ceil(n/64)]`` (inverse of :func:`unpack_mask`)."""
    n = dense.shape[-1]
    words = (n + _WORD_BITS - 1) // _WORD_BITS
    padded = torch.zeros(*dense.shape[:-1], words * _WORD_BITS, dtype=torch.int64, device=dense.device)
    padded[..., :n] = dense.long()
    shifts = torch.arange(_WORD_BITS, device=dense.device, dtype=torch.int64)
    # Bits are disjoint, so a wrapping int64 sum equals a bitwise OR.
    return (padded.reshape(*dense.shape[:-1], words, _WORD_BITS) << shifts).sum(-1)


def _validate(tokens, parents, draft_probs, deterministic, vocab_size):
    """Check DraftTree invariants; return the vocabulary size (or None when unknown)."""
    devices = {t.device for t in (tokens, parents, deterministic)}
    if draft_probs is not None and isinstance(draft_probs, torch.Tensor):
        devices.add(draft_probs.device)
    if len(devices) > 1:
        raise ValueError(f"DraftTree tensors are on different devices: {sorted(str(d) for d in devices)}")
    if tokens.dim() != 1:
        raise ValueError(f"DraftTree tokens must be 1-D [n], got shape {tuple(tokens.shape)}")
    n = tokens.numel()
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool or tokens.is_complex():
        raise ValueError(f"DraftTree tokens must be an integer tensor, got dtype {tokens.dtype}")
    if parents.shape != (n,):
        raise ValueError(f"DraftTree parents must have shape [{n}] like tokens, got {tuple(parents.shape)}")
    if parents.dtype.is_floating_point or parents.dtype == torch.bool:
        raise ValueError(f"DraftTree parents must be an integer tensor, got dtype {parents.dtype}")
    if deterministic.shape != (n,) or deterministic.dtype != torch.bool:
        raise ValueError(
            f"DraftTree deterministic must be a bool tensor of shape [{n}], "
            f"got {deterministic.dtype} {tuple(deterministic.shape)}"
        )
    if n:
        idx = torch.arange(n, device=parents.device)
        bad = (parents >= idx).nonzero()
        if bad.numel():
            i = int(bad[0])
            raise ValueError(f"DraftTree parent of node {i} is {int(parents[i])}: parents must precede children "
                             "(parent < own index)")
        bad = (parents < -1).nonzero()
        if bad.numel():
            i = int(bad[0])
            raise ValueError(
                f"DraftTree parent of node {i} is {int(parents[i])}: must be -1 (the root) or a node index"
            )
        if int(tokens.min()) < 0:
            raise ValueError(f"DraftTree token ids must be >= 0, got {int(tokens.min())}")
    if draft_probs is not None:
        vocab_size = _validate_probs(tokens, draft_probs, deterministic, vocab_size)
    if vocab_size is not None and n and int(tokens.max()) >= vocab_size:
        raise ValueError(f"DraftTree token id {int(tokens.max())} is out of vocabulary (vocab_size={vocab_size})")
    return vocab_size


def _validate_probs(tokens, draft_probs, deterministic, vocab_size):
    n = tokens.numel()
    if not isinstance(draft_probs, torch.Tensor) or draft_probs.dim() != 2 or draft_probs.shape[0] != n:
        shape = tuple(draft_probs.shape) if isinstance(draft_probs, torch.Tensor) else type(draft_probs).__name__
        raise ValueError(f"DraftTree draft_probs must have shape [n={n}, V], got {shape}")
    if not draft_probs.dtype.is_floating_point:
        raise ValueError(f"DraftTree draft_probs must be floating point, got {draft_probs.dtype}")
    V = int(draft_probs.shape[1])
    if vocab_size is not None and vocab_size != V:
        raise ValueError(f"DraftTree vocab_size={vocab_size} but draft_probs has V={V} columns")
    if not n:
        return V
    if int(tokens.max()) >= V:
        raise ValueError(f"DraftTree token id {int(tokens.max())} is out of vocabulary (V={V})")
    # Every row must be finite and non-negative (a deterministic row too: zeros or a point mass);
    # sampled rows must be distributions.
    check_distributions(draft_probs, ~deterministic, "DraftTree draft_probs")
    tol = prob_tolerance(draft_probs.dtype)
    sampled = ~deterministic
    own = draft_probs.gather(1, tokens.long().unsqueeze(1)).squeeze(1)
    bad = (sampled & (own <= 0)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(
            f"DraftTree node {i} is marked sampled but draft_probs[{i}, {int(tokens[i])}] = 0: "
            "a sampled token must have positive probability under the q it was drawn from"
        )
    det_rows = deterministic.nonzero().squeeze(1)
    if det_rows.numel():
        rows = draft_probs[det_rows].double()
        if not bool(torch.isfinite(rows).all()) or bool((rows < 0).any()):
            i = int(det_rows[int((~torch.isfinite(rows) | (rows < 0)).any(-1).nonzero()[0])])
            raise ValueError(f"DraftTree draft_probs row {i} (a deterministic node) has NaN, inf or negative entries")
        zero = rows.abs().sum(-1) == 0
        point = ((rows.sum(-1) - 1).abs() <= tol) & ((own[det_rows].double() - 1).abs() <= tol)
        bad = (~(zero | point)).nonzero()
        if bad.numel():
            i = int(det_rows[int(bad[0])])
            raise ValueError(
                f"DraftTree node {i} is deterministic but draft_probs row {i} is neither all zeros nor a "
                f"point mass on its token {int(tokens[i])}"
            )
    return V


@dataclass(frozen=True)
class TreeBatch:
    """``B`` trees padded to ``N`` nodes on one device: ``tokens`` long ``[B, N]`` (0 in padding),
    ``parents`` int32 ``[B, N]`` (-1), ``deterministic`` bool ``[B, N]`` (True), ``sizes`` int32 ``[B]``,
    ``valid`` bool ``[B, N]``; ``position_offsets`` and ``ancestor_mask`` are built on first use."""

    trees: tuple[DraftTree, ...]
    tokens: torch.Tensor
    parents: torch.Tensor
    deterministic: torch.Tensor
    sizes: torch.Tensor
    valid: torch.Tensor

    @property
    def max_nodes(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def __len__(self) -> int:
        return len(self.trees)

    @functools.cached_property
    def position_offsets(self) -> torch.Tensor:
        """``LongTensor[B, N]``: offset from each request's first uncommitted position, 0 in padding."""
        out = torch.zeros(len(self.trees), self.max_nodes, dtype=torch.long)
        for b, t in enumerate(self.trees):
            out[b, : t.num_nodes] = t.position_offsets.cpu()
        return out.to(self.device)

    @functools.cached_property
    def ancestor_mask(self) -> torch.Tensor:
        """``int64[B, N, ceil(N/64)]``: packed ancestor bits, all-zero rows in padding."""
        N = self.max_nodes
        out = torch.zeros(len(self.trees), N, (N + _WORD_BITS - 1) // _WORD_BITS, dtype=torch.int64)
        for b, t in enumerate(self.trees):
            if t.num_nodes:
                out[b, : t.num_nodes, : t.ancestor_mask.shape[1]] = t.ancestor_mask.cpu()
        return out.to(self.device)


def pack_trees(trees: Sequence[DraftTree], device=None) -> TreeBatch:
    """Pad and stack ``trees`` into a :class:`TreeBatch` on ``device`` (default: theirs). ValueError
    for an empty list, a non-DraftTree element or mixed devices."""
    if len(trees) == 0:
        raise ValueError("pack_trees needs at least one DraftTree")
    for i, t in enumerate(trees):
        if not isinstance(t, DraftTree):
            raise ValueError(f"pack_trees element {i} is a {type(t).__name__}, expected DraftTree")
    devices = {t.device for t in trees}
    if len(devices) > 1:
        raise ValueError(f"pack_trees got trees on different devices: {sorted(str(d) for d in devices)}")
    here = trees[0].device
    sizes = torch.tensor([t.num_nodes for t in trees], dtype=torch.int32, device=here)
    if int(sizes.max()):
        pad = torch.nn.utils.rnn.pad_sequence
        tokens = pad([t.tokens for t in trees], batch_first=True, padding_value=0)
        parents = pad([t.parents for t in trees], batch_first=True, padding_value=-1)
        deterministic = pad([t.deterministic for t in trees], batch_first=True, padding_value=True)
    else:
        tokens = torch.zeros(len(trees), 0, dtype=torch.long, device=here)
        parents = torch.zeros(len(trees), 0, dtype=torch.int32, device=here)
        deterministic = torch.zeros(len(trees), 0, dtype=torch.bool, device=here)
    valid = torch.arange(tokens.shape[1], device=here).unsqueeze(0) < sizes.unsqueeze(1)
    to = torch.device(device) if device is not None else here
    return TreeBatch(
        trees=tuple(trees),
        tokens=tokens.to(to),
        parents=parents.to(to),
        deterministic=deterministic.to(to),
        sizes=sizes.to(to),
        valid=valid.to(to),
    )
