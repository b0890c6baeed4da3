"""Medusa heads: extra next-next-token predictors on the target's last hidden state.

Head ``i`` maps the target's post-norm hidden state ``h_t`` through residual blocks ``x + SiLU(W x + b)``
(``W`` starts at zero: an untrained head is the LM head) and the target's shared LM head (not stored, so
heads are bound to one checkpoint) to predict the token at ``t + 2 + i``. Drafting uses a static tree
per budget: the ``budget`` index paths with the largest product of held-out rank accuracies (Medusa's
sparse tree); nodes are point masses, so verification is exact. ``vocab_ids`` (FR-Spec) narrows what
is drafted, never what is verified.
"""

from __future__ import annotations

import heapq
from typing import Hashable, Sequence

import torch
from torch import nn

from ..artifacts import Manifest, check_compatible, load_artifact, target_fingerprint
from ..ops.skinny_linear import linear_rows
from ..tree import DraftTree
from ..checks import as_token_list, normalize_budgets
from .reduced_vocab import DraftHead, check_vocab_ids, lm_rows


class ResBlock(nn.Module):
    """``x + SiLU(x W^T + b)`` over ``[..., H]``; ``W`` starts at zero (identity block)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.silu(self.linear(x))


class MedusaHeads(nn.Module):
    """``num_heads`` heads of ``num_layers`` residual blocks each, scored with a shared LM head.

    Args:
        hidden_size: the target's hidden size ``H``.
        num_heads: ``k``; head ``i`` predicts the token ``i + 2`` positions after the hidden state.
        num_layers: residual blocks per head.
        vocab_ids: optional ``LongTensor[R]`` of the token ids the heads score (reduced drafting
            vocabulary); None = the full vocabulary.
    """

    def __init__(self, hidden_size: int, num_heads: int, num_layers: int = 1, vocab_ids: torch.Tensor | None = None):
        super().__init__()
        if num_heads < 1 or num_layers < 1:
            raise ValueError(f"need num_heads >= 1 and num_layers >= 1, got {num_heads}, {num_layers}")
        self.hidden_size, self.num_heads, self.num_layers = hidden_size, num_heads, num_layers
        self.heads = nn.ModuleList(
            nn.Sequential(*[ResBlock(hidden_size) for _ in range(num_layers)]) for _ in range(num_heads)
        )
        self.register_buffer("vocab_ids", check_vocab_ids(vocab_ids), persistent=False)

    def features(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden [N, H]`` -> ``[k, N, H]``: each head's input to the LM head."""
        if hidden.dim() != 2 or hidden.shape[1] != self.hidden_size:
            raise ValueError(f"hidden must be [N, {self.hidden_size}], got {tuple(hidden.shape)}")
        return torch.stack([head(hidden) for head in self.heads])

    def lm_rows(self, lm_weight: torch.Tensor) -> torch.Tensor:
        """The LM-head rows the heads score: ``[R, H]`` (reduced) or ``[V, H]``."""
        return lm_rows(lm_weight, self.vocab_ids)

    def forward(self, hidden: torch.Tensor, lm_weight: torch.Tensor) -> torch.Tensor:
        """Logits ``[k, N, R]`` over the drafting vocabulary (``R = V`` without ``vocab_ids``)."""
        feats = self.features(hidden.to(lm_weight.dtype))
        return feats @ self.lm_rows(lm_weight).T

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        """Map drafting-vocabulary indices to token ids."""
        return idx if self.vocab_ids is None else self.vocab_ids.to(idx.device)[idx]

    def state_tensors(self, dtype: torch.dtype | None = torch.float16) -> dict[str, torch.Tensor]:
        """Tensors to save, weights cast to ``dtype`` (float16 halves the artifact; loading casts them
        to the target's dtype); the LM head is not among them: it belongs to the target."""
        out = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v)
               for k, v in self.state_dict().items()}
        if self.vocab_ids is not None:
            out["vocab_ids"] = self.vocab_ids
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], config: dict) -> "MedusaHeads":
        heads = cls(config["hidden_size"], config["num_heads"], config.get("num_layers", 1), tensors.get("vocab_ids"))
        weights = {k: v for k, v in tensors.items() if k != "vocab_ids"}
        missing, unexpected = heads.load_state_dict(weights, strict=False)
        if missing or unexpected:
            raise ValueError(f"Medusa weights do not match the config: missing {missing}, unexpected {unexpected}")
        return heads


def static_tree(rank_acc: Sequence[Sequence[float]], budget: int) -> list[tuple[int, ...]]:
    """The ``budget`` index paths with the largest product of ``rank_acc[d][r]`` (probability level
    ``d``'s ``r``-th candidate is correct), every path after its prefix."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    levels = [list(map(float, row)) for row in rank_acc]
    if not levels or any(not row for row in levels):
        raise ValueError("rank_acc must hold at least one level, each with at least one rank")
    heap = [(-levels[0][0], (0,))]
    chosen: list[tuple[int, ...]] = []
    while heap and len(chosen) < budget:
        neg, path = heapq.heappop(heap)
        if -neg <= 0:
            break
        chosen.append(path)
        d, r = len(path) - 1, path[-1]
        if r + 1 < len(levels[d]):  # next sibling
            sib = path[:-1] + (r + 1,)
            heapq.heappush(heap, (neg / levels[d][r] * levels[d][r + 1] if levels[d][r] > 0 else 0.0, sib))
        if d + 1 < len(levels):  # first child
            heapq.heappush(heap, (neg * levels[d + 1][0], path + (0,)))
    return sorted(chosen, key=lambda p: (len(p), p))


class MedusaProposer:
    """Drafts a static Medusa tree per request from the target hidden state of the last step.

    Args:
        heads: trained :class:`MedusaHeads`.
        lm_head_weight: the target's LM-head weight ``[V, H]`` (shared, not copied).
        rank_acc: per level, accuracy of each candidate rank (from training); sets the tree shape.
        artifact: the manifest-derived :class:`~specdec.Artifact` (bound to the target).
        head_dtype: how the drafting vocabulary's LM-head rows are held
            (:class:`~specdec.proposers.reduced_vocab.DraftHead`; default: float16 for a reduced vocabulary).
    """

    requires_target_hidden = True

    def __init__(self, heads: MedusaHeads, lm_head_weight: torch.Tensor, rank_acc: Sequence[Sequence[float]],
                 artifact, *, head_dtype: str | None = None):
        if lm_head_weight.dim() != 2 or lm_head_weight.shape[1] != heads.hidden_size:
            raise ValueError(f"lm_head_weight must be [V, {heads.hidden_size}], got {tuple(lm_head_weight.shape)}")
        if len(rank_acc) != heads.num_heads:
            raise ValueError(f"rank_acc has {len(rank_acc)} levels, expected one per head ({heads.num_heads})")
        self.heads = heads.to(lm_head_weight.device, lm_head_weight.dtype).eval()
        self.lm_weight = lm_head_weight.detach()
        # The drafting vocabulary's LM-head rows, gathered once (not per step) for a reduced vocabulary.
        self.head = DraftHead(self.lm_weight, self.heads.vocab_ids, head_dtype)
        self.vocab_size = int(lm_head_weight.shape[0])
        self.rank_acc = [list(map(float, r)) for r in rank_acc]
        self.artifact = artifact
        self._hidden: dict[Hashable, torch.Tensor] = {}
        # After ``begin`` alone the next token is still unknown: the LM head itself drafts depth 1.
        self._next_known: dict[Hashable, bool] = {}
        self._trees: dict[tuple[int, bool], tuple[tuple[int, ...], ...]] = {}

    @classmethod
    def load(cls, directory: str, target_model, *, allow_mismatch: bool = False,
             head_dtype: str | None = None) -> "MedusaProposer":
        """Load heads saved by ``specdec train heads``; refuses another checkpoint unless overridden."""
        tensors, manifest = load_artifact(directory)
        if manifest.kind != "medusa":
            raise ValueError(f"{directory} holds a {manifest.kind!r} artifact, not 'medusa'")
        check_compatible(manifest, target_fingerprint(target_model), allow_mismatch=allow_mismatch)
        return cls.from_manifest(tensors, manifest, target_model.get_output_embeddings().weight, head_dtype=head_dtype)

    @classmethod
    def from_manifest(cls, tensors, manifest: Manifest, lm_head_weight: torch.Tensor, *,
                      head_dtype: str | None = None) -> "MedusaProposer":
        opts = manifest.drafting_options(("head_dtype",), {"head_dtype": head_dtype})  # before the heads are built
        heads = MedusaHeads.from_tensors(tensors, manifest.config)
        return cls(heads, lm_head_weight, manifest.config["rank_acc"], manifest.to_artifact(), **opts)

    def _tree(self, budget: int, lm_level: bool) -> tuple[tuple[int, ...], ...]:
        """Static tree for this budget (cached: the shape depends only on budget and rank_acc)."""
        key = (budget, lm_level)
        if key not in self._trees:
            acc = ([[1.0]] if lm_level else []) + self.rank_acc
            self._trees[key] = tuple(static_tree(acc, budget))
        return self._trees[key]

    # ------------------------------------------------------------------ lifecycle
    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None) -> None:
        if req_id in self._hidden:
            raise ValueError(f"request {req_id!r} already begun")
        as_token_list(prompt_ids, "prompt_ids", self.vocab_size)
        self._hidden[req_id] = self._last_row(target_hidden, "begin")
        self._next_known[req_id] = False

    def commit(self, req_id, accepted_ids, *, target_hidden=None) -> None:
        self._state(req_id)
        ids = as_token_list(accepted_ids, "accepted_ids", self.vocab_size)
        if not ids:
            raise ValueError("commit needs at least one emitted token")
        h = self._last_row(target_hidden, "commit")
        if target_hidden.shape[0] != len(ids):
            raise ValueError(f"commit target_hidden has {target_hidden.shape[0]} rows for {len(ids)} tokens")
        self._hidden[req_id] = h
        self._next_known[req_id] = True

    def end(self, req_id) -> None:
        self._state(req_id)
        del self._hidden[req_id], self._next_known[req_id]

    def memory_bytes(self) -> int:
        """Head weights, reduced-vocabulary head rows and one hidden row per request (not the LM head)."""
        own = sum(p.numel() * p.element_size() for p in self.heads.parameters())
        if self.heads.vocab_ids is not None:
            own += self.heads.vocab_ids.numel() * 8 + self.head.nbytes
        return own + sum(h.numel() * h.element_size() for h in self._hidden.values())

    def _state(self, req_id) -> torch.Tensor:
        if req_id not in self._hidden:
            raise KeyError(f"unknown request {req_id!r}: call begin() first")
        return self._hidden[req_id]

    def _last_row(self, target_hidden, where: str) -> torch.Tensor:
        H = self.heads.hidden_size
        if target_hidden is None:
            raise ValueError(f"MedusaProposer.{where} needs target_hidden (requires_target_hidden is True)")
        if target_hidden.dim() != 2 or target_hidden.shape[1] != H or target_hidden.shape[0] == 0:
            raise ValueError(f"{where} target_hidden must be [n >= 1, {H}], got {tuple(target_hidden.shape)}")
        return target_hidden[-1].detach().to(self.lm_weight.device, self.lm_weight.dtype)

    # ------------------------------------------------------------------ drafting
    @torch.no_grad()
    def propose(self, req_ids: Sequence[Hashable], budget) -> list[DraftTree]:
        budgets = normalize_budgets(req_ids, budget)
        if not req_ids:
            return []
        hidden = torch.stack([self._state(r) for r in req_ids])  # [B, H]
        paths_per = [self._tree(b, not self._next_known[r]) for r, b in zip(req_ids, budgets)]
        width = max((max(p) + 1 for paths in paths_per for p in paths), default=1)
        # Few-row products against large weight matrices: the skinny-linear kernel on CPU.
        head_logits = self.head.logits(self.heads.features(hidden))  # [k, B, R]
        cand = self.heads.token_ids(torch.topk(head_logits, min(width, head_logits.shape[-1]), dim=-1).indices)
        cand = cand.tolist()  # [k][B][width]: one device sync, then plain indexing
        # The LM head's own top token is needed only right after begin (the next token is unknown).
        first = [b for b, r in enumerate(req_ids) if not self._next_known[r]]
        lm_top = {}
        if first:
            top = torch.topk(linear_rows(hidden[first], self.lm_weight, None), 1, dim=-1).indices
            lm_top = dict(zip(first, top.tolist()))
        out = []
        for b, paths in enumerate(paths_per):
            levels = ([lm_top[b]] if b in lm_top else []) + [cand[d][b] for d in range(len(cand))]
            out.append(self._tree_from_paths(paths, [levels[len(p) - 1][p[-1]] for p in paths]))
        return out

    def _tree_from_paths(self, paths, toks) -> DraftTree:
        """Paths are prefix-closed and sorted by length, so each node's parent is already placed."""
        if not paths:
            return DraftTree.empty(self.lm_weight.device, vocab_size=self.vocab_size)
        index = {p: i for i, p in enumerate(paths)}
        parents = [index[p[:-1]] if len(p) > 1 else -1 for p in paths]
        tokens = torch.tensor(toks, dtype=torch.long, device=self.lm_weight.device)
        return DraftTree(tokens, torch.tensor(parents, dtype=torch.int32, device=tokens.device),
                         vocab_size=self.vocab_size)
