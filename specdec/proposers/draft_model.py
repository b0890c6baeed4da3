"""Draft-model proposer: any Hugging Face causal LM drafts for the target, with its own KV cache.

Bound to the target's tokenizer: construction refuses any tokenizer that differs (no re-mapping).
Per request a ``DynamicCache`` holds the drafter's K/V for a prefix of the committed tokens;
``propose`` feeds what it has not seen (at least the last token), ``commit`` crops it to the longest
still-valid prefix. Modes: ``"greedy"`` (argmax chain, point masses), ``"sample"`` (a chain drawn from
``q = sampling.process(draft logits)``, each node carrying its exact ``q`` row) and ``"tree"`` (dynamic
top-k: each level expands the ``width`` best frontier nodes in one forward under a 4-D mask; the
``budget`` best by path probability are kept; point masses). A path stops once its cumulative draft
probability falls below ``min_path_prob``.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

import torch

from ..artifacts import (
    check_tokenizers_identical,
    tensors_fingerprint,
    tokenizer_fingerprint,
)
from ..sampling.params import SamplingParams
from ..verify.patch import ForwardPatch
from ..tree import DraftTree
from .base import Artifact
from ..checks import as_token_list, normalize_budgets

MODES = ("greedy", "sample", "tree")


def crop_cache(cache, keep: int) -> None:
    """Truncate a ``DynamicCache`` to its first ``keep`` positions (no-op when already shorter)."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)


@dataclass
class _Request:
    committed: list[int]
    cache: Any
    n_cached: int = 0  # committed tokens whose KV is in the cache (a prefix of ``committed``)
    spec: list[int] = field(default_factory=list)  # drafted chain tokens whose KV follows them
    root_logits: torch.Tensor | None = None  # drafter logits after committed[:n_cached]
    sampling: SamplingParams | None = None  # "sample" mode: the q this request drafts from (None: argmax)


class DraftModelProposer:
    """Drafts with a (small) causal LM that shares the target's tokenizer.

    Args:
        model: a Hugging Face causal LM (eval mode); its logits width must equal the target's.
        target_tokenizer, draft_tokenizer: Hugging Face tokenizers or
            :class:`~specdec.artifacts.TokenizerInfo`; they must be identical.
        mode: ``"greedy"``, ``"sample"`` or ``"tree"`` (see module docstring).
        sampling: ``"sample"`` mode's default :class:`~specdec.sampling.SamplingParams` (temperature
            > 0; refused in other modes); a request's own (``begin(..., sampling=...)``) wins, and a
            greedy request drafts the argmax chain.
        width: tree mode: children per expanded node and nodes expanded per level.
        min_path_prob: stop a path below this cumulative draft probability (0: depth = budget).
        max_depth: cap on the depth of any draft (None = the budget).
        target_vocab_size: the target's logits width; checked against the drafter's.
        generator: torch.Generator for ``"sample"`` mode (reproducible drafts).
        name: artifact name (default ``"draft:<model name>"``).
    """

    requires_target_hidden = False
    accepts_sampling = True  # begin() takes the request's SamplingParams

    def __init__(self, model, *, target_tokenizer, draft_tokenizer, mode: str = "greedy",
                 sampling: SamplingParams | None = None, width: int = 2,
                 min_path_prob: float = 0.0, max_depth: int | None = None,
                 target_vocab_size: int | None = None, generator: torch.Generator | None = None,
                 name: str | None = None):
        if mode not in MODES:
            raise ValueError(f"DraftModelProposer mode must be one of {MODES}, got {mode!r}")
        if mode != "sample" and sampling is not None:
            raise ValueError(f"sampling only applies to mode='sample', got mode={mode!r}")
        if mode == "sample" and (sampling is None or sampling.greedy):
            raise ValueError("mode='sample' needs sampling=SamplingParams(temperature > 0); use mode='greedy' for 0")
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        if not 0.0 <= min_path_prob <= 1.0:
            raise ValueError(f"min_path_prob must be in [0, 1], got {min_path_prob}")
        if max_depth is not None and max_depth < 1:
            raise ValueError(f"max_depth must be >= 1 or None, got {max_depth}")
        check_tokenizers_identical(draft_tokenizer, target_tokenizer)
        vocab = model.get_output_embeddings().weight.shape[0]
        if target_vocab_size is not None and target_vocab_size != vocab:
            raise ValueError(
                f"drafter logits have {vocab} columns but the target's have {target_vocab_size}: "
                "draft distributions must cover the target's vocabulary exactly"
            )
        self.model = model.eval()
        # The drafter's few-row forwards go through the skinny-linear kernel, like the target's.
        self._linears = ForwardPatch(model, linears=model, attention=False)
        # transformers >= 5.2x renamed ``past_key_values`` to ``cache``; accept either.
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.mode, self.sampling = mode, sampling
        self.width, self.min_path_prob, self.max_depth = width, min_path_prob, max_depth
        self.vocab_size = vocab
        self.generator = generator
        self._requests: dict[Hashable, _Request] = {}
        cfg = model.config
        label = name or f"draft:{getattr(cfg, '_name_or_path', '') or type(model).__name__}"
        self.artifact = Artifact(
            name=label,
            bound_to="tokenizer",
            fingerprint=tokenizer_fingerprint(target_tokenizer),
            version=tensors_fingerprint(model.state_dict().items()),
            details={
                "mode": mode,
                "width": width,
                "min_path_prob": min_path_prob,
                "layers": getattr(cfg, "num_hidden_layers", None),
                "hidden_size": getattr(cfg, "hidden_size", None),
            },
        )

    # ------------------------------------------------------------------ accounting
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def weight_bytes(self) -> int:
        """Bytes of the drafter's parameters and buffers (tied tensors counted once)."""
        seen, total = set(), 0
        for t in list(self.model.parameters()) + list(self.model.buffers()):
            if t.data_ptr() in seen:
                continue
            seen.add(t.data_ptr())
            total += t.numel() * t.element_size()
        return total

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies in the drafter (keys + values, all layers)."""
        cfg = self.model.config
        heads = getattr(cfg, "num_attention_heads")
        kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        elem = next(self.model.parameters()).element_size()
        return 2 * cfg.num_hidden_layers * kv_heads * head_dim * elem

    def memory_bytes(self, batch: int | None = None, context: int | None = None) -> int:
        """Weights plus KV cache: for ``batch`` x ``context`` tokens when given, else the caches held now."""
        if (batch is None) != (context is None):
            raise ValueError("memory_bytes needs both batch and context, or neither")
        if batch is not None:
            if batch < 0 or context < 0:
                raise ValueError(f"batch and context must be >= 0, got {batch}, {context}")
            return self.weight_bytes() + batch * context * self.kv_bytes_per_token()
        held = sum(r.cache.get_seq_length() for r in self._requests.values())
        return self.weight_bytes() + held * self.kv_bytes_per_token()

    # ------------------------------------------------------------------ lifecycle
    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None, sampling=None) -> None:
        """Open ``req_id``; ``sampling``: the request's processing for ``"sample"`` drafts (default: the
        constructor's; greedy: argmax)."""
        if req_id in self._requests:
            raise ValueError(f"request {req_id!r} already begun")
        if target_hidden is not None:
            raise ValueError("DraftModelProposer does not use target_hidden (requires_target_hidden is False)")
        prompt = as_token_list(prompt_ids, "prompt_ids")
        if not prompt:
            raise ValueError("prompt_ids must hold at least one token")
        self._check_vocab(prompt, "prompt_ids")
        from transformers import DynamicCache

        if sampling is not None and not isinstance(sampling, SamplingParams):
            raise TypeError(f"sampling must be a SamplingParams or None, got {type(sampling).__name__}")
        own = (sampling or self.sampling) if self.mode == "sample" else None
        self._requests[req_id] = _Request(
            committed=prompt, cache=DynamicCache(), sampling=None if own is None or own.greedy else own
        )

    def end(self, req_id) -> None:
        self._state(req_id)
        del self._requests[req_id]

    def commit(self, req_id, accepted_ids, *, target_hidden=None) -> None:
        """Append the emitted tokens; keep only the cache rows that are still a valid prefix."""
        r = self._state(req_id)
        ids = as_token_list(accepted_ids, "accepted_ids")
        self._check_vocab(ids, "accepted_ids")
        if r.n_cached == len(r.committed):
            keep = 0
            while keep < min(len(r.spec), len(ids)) and r.spec[keep] == ids[keep]:
                keep += 1
            r.n_cached += keep
        crop_cache(r.cache, r.n_cached)
        r.spec = []
        r.root_logits = None
        r.committed.extend(ids)

    def _state(self, req_id) -> _Request:
        if req_id not in self._requests:
            raise KeyError(f"unknown request {req_id!r}: call begin() first")
        return self._requests[req_id]

    def _check_vocab(self, ids: list[int], what: str) -> None:
        if ids and max(ids) >= self.vocab_size:
            raise ValueError(f"{what} holds token id {max(ids)} outside the drafter's vocabulary of {self.vocab_size}")

    # ------------------------------------------------------------------ drafting
    @torch.no_grad()
    def propose(self, req_ids: Sequence[Hashable], budget) -> list[DraftTree]:
        out = []
        for req_id, b in zip(req_ids, normalize_budgets(req_ids, budget)):
            r = self._state(req_id)
            depth_cap = b if self.max_depth is None else min(b, self.max_depth)
            if b == 0:
                out.append(DraftTree.empty(self.device, vocab_size=self.vocab_size))
                continue
            root = self._sync(r)
            if self.mode == "tree":
                out.append(self._draft_tree(r, root, b, depth_cap))
            else:
                out.append(self._draft_chain(r, root, depth_cap))
        return out

    def _forward(self, r: _Request, ids: list[int], positions: list[int], mask: torch.Tensor | None = None):
        """Run the drafter on ``ids`` at ``positions``, appending their KV; returns logits ``[len(ids), V]``."""
        dev = self.device
        with self._linears:
            out = self.model(
                input_ids=torch.tensor([ids], device=dev),
                position_ids=torch.tensor([positions], device=dev),
                attention_mask=mask,
                use_cache=True,
                **{self._cache_kw: r.cache},
            )
        return out.logits[0].float()

    def _sync(self, r: _Request) -> torch.Tensor:
        """Make the cache hold exactly the committed tokens; return logits after them ``[V]``."""
        if r.spec or r.cache.get_seq_length() != r.n_cached:
            crop_cache(r.cache, r.n_cached)
            r.spec = []
        if r.root_logits is not None and r.n_cached == len(r.committed):
            return r.root_logits
        start = min(r.n_cached, len(r.committed) - 1)  # always feed >= 1 token to get its logits
        crop_cache(r.cache, start)
        logits = self._forward(r, r.committed[start:], list(range(start, len(r.committed))))
        r.n_cached = len(r.committed)
        r.root_logits = logits[-1]
        return r.root_logits

    def _draft_chain(self, r: _Request, logits: torch.Tensor, depth: int) -> DraftTree:
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        cum = 1.0
        sample = r.sampling is not None
        base = len(r.committed)
        for d in range(depth):
            if sample:
                q = r.sampling.process(logits)
                tok = int(torch.multinomial(q, 1, generator=self.generator))
                p = float(q[tok])
            else:
                q = torch.softmax(logits, -1)
                tok = int(torch.argmax(logits))
                p = float(q[tok])
            if cum * p < self.min_path_prob:
                break
            cum *= p
            tokens.append(tok)
            if sample:
                rows.append(q)
            if d + 1 < depth:
                logits = self._forward(r, [tok], [base + d])[-1]
                r.spec.append(tok)
        toks = torch.tensor(tokens, dtype=torch.long, device=self.device)
        if sample:
            probs = torch.stack(rows) if rows else torch.zeros(0, self.vocab_size, device=self.device)
            return DraftTree.chain(toks, probs, vocab_size=self.vocab_size)
        return DraftTree.chain(toks, vocab_size=self.vocab_size)

    def _draft_tree(self, r: _Request, root_logits: torch.Tensor, budget: int, depth: int) -> DraftTree:
        """Dynamic top-k tree: expand the best ``width`` frontier nodes per level, keep the best ``budget``."""
        base = len(r.committed)
        tokens: list[int] = []
        parents: list[int] = []
        scores: list[float] = []  # log path probability
        depths: list[int] = []
        fed_slot: dict[int, int] = {}  # node -> index among fed tree tokens (cache row base + slot)
        log_floor = math.log(self.min_path_prob) if self.min_path_prob > 0 else -math.inf

        def add_children(parent: int, logits: torch.Tensor, parent_score: float, d: int) -> None:
            logp = torch.log_softmax(logits, -1)
            top = torch.topk(logp, min(self.width, logp.numel()))
            for lp, tok in zip(top.values.tolist(), top.indices.tolist()):
                s = parent_score + lp
                if s >= log_floor:
                    tokens.append(tok)
                    parents.append(parent)
                    scores.append(s)
                    depths.append(d)

        add_children(-1, root_logits, 0.0, 1)
        for d in range(1, depth):
            frontier = [i for i in range(len(tokens)) if depths[i] == d]
            frontier = sorted(frontier, key=lambda i: -scores[i])[: self.width]
            if not frontier:
                break
            n_fed = len(fed_slot)
            for j, node in enumerate(frontier):
                fed_slot[node] = n_fed + j
            mask = self._tree_mask(frontier, parents, fed_slot, base)
            logits = self._forward(r, [tokens[i] for i in frontier], [base + d - 1] * len(frontier), mask)
            for j, node in enumerate(frontier):
                add_children(node, logits[j], scores[node], d + 1)
        crop_cache(r.cache, r.n_cached)
        return self._select(tokens, parents, scores, budget)

    def _tree_mask(self, frontier, parents, fed_slot, base) -> torch.Tensor:
        """Additive mask ``[1, 1, m, base + n_fed]``: each fed node sees the committed prefix, its
        fed ancestors and itself, nothing else."""
        total = base + len(fed_slot)
        dtype = next(self.model.parameters()).dtype
        mask = torch.full((len(frontier), total), torch.finfo(dtype).min, dtype=dtype, device=self.device)
        mask[:, :base] = 0
        for j, node in enumerate(frontier):
            a = node
            while a >= 0:
                mask[j, base + fed_slot[a]] = 0
                a = parents[a]
        return mask[None, None]

    def _select(self, tokens, parents, scores, budget) -> DraftTree:
        """The ``budget`` best nodes (ancestor-closed; ties to the lower index), renumbered in order."""
        order = sorted(range(len(tokens)), key=lambda i: (-scores[i], i))
        keep: set[int] = set()
        for i in order:
            if len(keep) >= budget:
                break
            if parents[i] < 0 or parents[i] in keep:
                keep.add(i)
        kept = sorted(keep)
        remap = {old: new for new, old in enumerate(kept)}
        toks = torch.tensor([tokens[i] for i in kept], dtype=torch.long, device=self.device)
        pars = torch.tensor(
            [remap[parents[i]] if parents[i] >= 0 else -1 for i in kept], dtype=torch.int32, device=self.device
        )
        return DraftTree(toks, pars, vocab_size=self.vocab_size)
