"""Run a Hugging Face causal LM over a batch of DraftTrees in one forward, and compact its KV cache.

Cache design (ragged batches)
-----------------------------
All requests of a batch share one ``DynamicCache`` whose tensors are ``[B, Hkv, S, D]``. Request
``b`` owns the *right-padded* rows ``[0, lengths[b])``; rows ``[lengths[b], S)`` are holes left by
requests that accepted fewer tokens than the longest one, and the attention mask hides them. This
keeps every request's positions natural (``position = row``), needs no left padding and no
per-request caches, and makes compaction a single gather over the cache's *tail* (rows from
``min(lengths)`` on), so its cost does not grow with the prefix.

One verify step for request ``b`` feeds ``1 + N`` tokens: the *pending* token (the last emitted
token, whose K/V is not cached yet) at position ``lengths[b]``, then the tree nodes, node ``i`` at
position ``lengths[b] + 1 + depth[i] - 1``. The forward appends ``1 + N`` rows at ``[S, S + 1 + N)``.
Row 0 of the output is the target distribution after the committed prefix (the tree's root), row
``1 + i`` the distribution after node ``i``. After acceptance of node path ``p`` the pending row and
the rows of ``p`` move to ``[lengths[b], lengths[b] + 1 + len(p))`` and the cache is cropped to the
longest request; the next step's pending token is the bonus/recovery token.

The mask is a 4-D additive float mask ``[B, 1, 1 + N, S + 1 + N]`` handed to the model as a
prepared mask (transformers uses a 4-D mask as-is), so the model code is not forked. When no row
needs it (no holes and every tree a chain of one common length) no mask is passed and the model
uses its own causal path: plain decoding then runs the same kernels as ``model.generate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..proposers.base import as_token_list
from ..tree import DraftTree, unpack_mask
from ..tree_batch import pack_trees
from .gqa_sdpa import GroupedSDPA
from .linears import SkinnyLinears, lm_head_logits

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gpt2")


@dataclass
class BatchState:
    """KV state of a batch of requests between verify steps.

    Attributes:
        cache: the shared ``DynamicCache`` (``[B, Hkv, S, D]`` per layer).
        lengths: committed K/V rows per request (``len == B``).
        pending: the emitted-but-not-cached token of each request (``len == B``), fed first on the
            next verify step.
        verified: ``(N, parents per request)`` of the verify step whose rows await
            :meth:`HFTarget.accept` / :meth:`HFTarget.discard`, else ``None``; lets them check the
            paths and the row count they are given against what the forward actually appended.
    """

    cache: object
    lengths: list[int]
    pending: list[int]
    verified: tuple[int, tuple[list[int], ...]] | None = None

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    @property
    def cache_len(self) -> int:
        return self.cache.get_seq_length()


@dataclass
class VerifyOutput:
    """Target outputs of one verify forward.

    Attributes:
        logits: ``float32 [B, 1 + N, V]``; row 0 after the committed prefix, row ``1 + i`` after node i.
        hidden: ``[B, 1 + N, H]`` final (post-norm) hidden states at the same rows (with
            ``HFTarget(hidden_layers=...)``: those layers' states concatenated, ``[B, 1 + N, len * H]``).
        trees: the verified trees (``len == B``).
    """

    logits: torch.Tensor
    hidden: torch.Tensor
    trees: tuple[DraftTree, ...]


class HFTarget:
    """Adapter running a transformers ``*ForCausalLM`` as a speculative-decoding target.

    Args:
        model: a Llama-family (llama, mistral, qwen2, qwen3) or GPT-2 causal LM, in eval mode.
        attention: ``"mask"`` (default: the model's own attention with a 4-D additive mask; an
            SDPA model runs :mod:`specdec.target.gqa_sdpa` during specdec's forwards, which skips
            transformers' copy of grouped K/V heads) or
            ``"tree_op"`` (Llama-family only: :mod:`specdec.ops.hf_attention` registers the
            specdec tree-attention op with transformers' attention registry; steps without holes
            in the cache use it, ragged steps fall back to the 4-D mask).
        skinny_linear: route the model's float32 CPU ``nn.Linear`` layers and the LM head through
            :func:`specdec.ops.skinny_linear` during specdec's forwards (default True; see
            :mod:`specdec.target.linears`). False keeps the model's own ``F.linear`` calls.
        hidden_layers: None (default): ``hidden`` outputs are the final post-norm hidden states.
            A tuple of ``output_hidden_states`` indices: they are those states concatenated
            (``[..., len * H]``), what an EAGLE-3 proposer (``target_layers``) reads.

    Raises:
        ValueError: for a model type the adapter has not been verified on, or sliding-window
            attention (its cache layers drop rows, which breaks compaction).
    """

    def __init__(self, model, *, attention: str = "mask", skinny_linear: bool = True, hidden_layers=None):
        config = getattr(model, "config", None)
        model_type = getattr(config, "model_type", None)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"HFTarget supports model types {SUPPORTED_MODEL_TYPES}, got {model_type!r} "
                f"({type(model).__name__}); other architectures are not verified for tree masks"
            )
        if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
            raise ValueError(
                f"HFTarget does not support sliding-window attention (config.sliding_window="
                f"{config.sliding_window}): its cache layers drop rows, which breaks KV compaction"
            )
        if attention not in ("mask", "tree_op"):
            raise ValueError(f"attention must be 'mask' or 'tree_op', got {attention!r}")
        self.model = model.eval()
        self.config = config
        self.attention = attention
        if attention == "tree_op":
            self._enable_tree_op()
        self.base = getattr(model, model.base_model_prefix)
        self.lm_head = model.get_output_embeddings()
        self.vocab_size = int(self.lm_head.weight.shape[0])
        self.skinny_linear = bool(skinny_linear)
        self._linears = SkinnyLinears(self.base if self.skinny_linear else None)
        self._attention = GroupedSDPA(self.model)
        self.hidden_layers = None if hidden_layers is None else tuple(int(i) for i in hidden_layers)
        if self.hidden_layers is not None and not all(0 <= i <= config.num_hidden_layers for i in self.hidden_layers):
            raise ValueError(f"hidden_layers {self.hidden_layers} must lie in [0, {config.num_hidden_layers}]")

    def with_hidden_layers(self, hidden_layers) -> "HFTarget":
        """The same model and settings, returning the concatenated ``hidden_layers`` states as ``hidden``."""
        return HFTarget(self.model, attention=self.attention, skinny_linear=self.skinny_linear,
                        hidden_layers=hidden_layers)

    def _enable_tree_op(self) -> None:
        try:
            from ..ops import hf_attention
        except ImportError as exc:
            raise ValueError("attention='tree_op' needs specdec.ops.hf_attention, which is not available") from exc
        hf_attention.enable(self.model)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    # ------------------------------------------------------------------ forward helpers
    def _forward(self, input_ids, position_ids, mask, cache, rows=None, extra=None) -> tuple[torch.Tensor, torch.Tensor]:
        """One base-model forward; returns (float32 logits, hidden ``[B, T, H]``).

        Logits are ``[B, T, V]``, or ``[B, V]`` at positions ``rows`` (``LongTensor[B]``) when given:
        prefill needs only the last position, and the LM head over a long prompt is expensive.
        """
        with self._linears, self._attention:
            out = self.base(
                input_ids=input_ids,
                position_ids=position_ids,
                attention_mask=mask,
                cache=cache,
                use_cache=True,
                output_hidden_states=self.hidden_layers is not None,
                **(extra or {}),
            )
        hidden = out.last_hidden_state
        feats = hidden
        if self.hidden_layers is not None:
            feats = torch.cat([out.hidden_states[i] for i in self.hidden_layers], -1)
        if rows is not None:
            picked = hidden[torch.arange(hidden.shape[0], device=hidden.device), rows]
            return self._logits(picked), feats
        return self._logits(hidden), feats

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.skinny_linear:
            return lm_head_logits(self.lm_head, hidden).float()
        return self.lm_head(hidden).float()

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        """bool ``[B, T, K]`` -> additive float mask ``[B, 1, T, K]`` in the model's dtype."""
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed.to(self.device), torch.finfo(self.dtype).min)
        return mask.unsqueeze(1)

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.config)

    # ------------------------------------------------------------------ prefill
    @torch.inference_mode()
    def prefill(self, prompts: Sequence[Sequence[int]]) -> tuple[BatchState, torch.Tensor, list[torch.Tensor]]:
        """Encode prompts (right-padded into one batch).

        Returns:
            state: cache with each prompt's K/V (``lengths[b] = len(prompts[b])``), pending unset (-1).
            logits: ``float32 [B, V]`` target logits after each full prompt.
            hidden: per request ``[len(prompt), H]`` final hidden states at every prompt position.
        """
        if not prompts:
            raise ValueError("prefill needs at least one prompt")
        lens = [len(p) for p in prompts]
        if min(lens) == 0:
            raise ValueError("every prompt needs at least one token")
        for p in prompts:
            if min(p) < 0 or max(p) >= self.vocab_size:
                raise ValueError(f"prompt token ids must lie in [0, {self.vocab_size}), got range [{min(p)}, {max(p)}]")
        B, T = len(prompts), max(lens)
        ids = torch.zeros(B, T, dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, : lens[b]] = torch.as_tensor(list(p), dtype=torch.long)
        pos = torch.arange(T).unsqueeze(0).expand(B, T)
        mask = None
        if len(set(lens)) > 1:
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            valid = torch.arange(T).unsqueeze(0) < torch.tensor(lens).unsqueeze(1)  # [B, T] keys
            allowed = causal.unsqueeze(0) & valid.unsqueeze(1)
            allowed |= torch.eye(T, dtype=torch.bool).unsqueeze(0)  # padded rows: keep softmax finite
            mask = self._additive(allowed)
        cache = self.new_cache()
        last = torch.tensor([n - 1 for n in lens], device=self.device)
        logits, hidden = self._forward(ids.to(self.device), pos.to(self.device), mask, cache, rows=last)
        state = BatchState(cache=cache, lengths=list(lens), pending=[-1] * B)
        return state, logits, [hidden[b, : lens[b]] for b in range(B)]

    # ------------------------------------------------------------------ verify
    def _tree_inputs(self, state: BatchState, trees: Sequence[DraftTree]):
        """Token ids, position ids ``[B, 1 + N]``, mask (or None) and extra forward kwargs (tree-op
        mode without holes: the packed ancestor mask with the pending token as root)."""
        batch = pack_trees(trees, device="cpu")  # index bookkeeping on the host; moved once below
        B, N, S = len(trees), batch.max_nodes, state.cache_len
        lengths = torch.tensor(state.lengths, dtype=torch.long)
        pending = torch.tensor(state.pending, dtype=torch.long)
        ids = torch.cat([pending.unsqueeze(1), batch.tokens], dim=1)
        pos = lengths.unsqueeze(1) + torch.cat([torch.zeros(B, 1, dtype=torch.long), 1 + batch.position_offsets], 1)
        sizes = set(batch.sizes.tolist())
        no_holes = all(L == S for L in state.lengths)
        if no_holes and len(sizes) == 1 and all(t.is_chain for t in trees):
            return ids, pos, None, None
        if no_holes and self.attention == "tree_op":
            from ..ops.hf_attention import tree_kwargs

            extra = tree_kwargs(batch.ancestor_mask.to(self.device), state.lengths, add_root_node=True,
                                total_rows=S + 1 + N)
            return ids, pos, None, extra
        prefix = torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)  # [B, S]
        anc = unpack_mask(batch.ancestor_mask, N) if N else torch.zeros(B, 0, 0, dtype=torch.bool)
        anc = anc | (torch.eye(N, dtype=torch.bool).unsqueeze(0) & ~batch.valid.unsqueeze(2))  # padding: self
        new = torch.zeros(B, 1 + N, 1 + N, dtype=torch.bool)
        new[:, :, 0] = True  # every row sees the pending token
        new[:, 1:, 1:] = anc
        allowed = torch.cat([prefix.unsqueeze(1).expand(B, 1 + N, S), new], dim=2)
        return ids, pos, self._additive(allowed), None

    @torch.inference_mode()
    def verify(self, state: BatchState, trees: Sequence[DraftTree]) -> VerifyOutput:
        """One forward over the pending token and every node of every tree.

        ``trees[b]`` belongs to request ``b`` of ``state``. The forward appends ``1 + N`` K/V rows per
        request; call :meth:`accept` next to keep the accepted ones.
        """
        if len(trees) != state.batch_size:
            raise ValueError(f"verify got {len(trees)} trees for a batch of {state.batch_size} requests")
        if min(state.pending) < 0:
            raise ValueError("verify needs a pending token per request: call accept() or set_pending() first")
        if state.verified is not None:
            raise ValueError("the previous verify step's rows are still in the cache: call accept() or discard() first")
        ids, pos, mask, extra = self._tree_inputs(state, trees)
        if ids.numel() and int(ids.max()) >= self.vocab_size:  # one check for every tree and pending token
            b = int((ids >= self.vocab_size).any(dim=1).nonzero()[0])
            raise ValueError(f"tree {b} has token id {int(ids[b].max())} >= vocab_size {self.vocab_size}")
        logits, hidden = self._forward(ids.to(self.device), pos.to(self.device), mask, state.cache, extra=extra)
        state.verified = (ids.shape[1] - 1, tuple(t.parents.tolist() for t in trees))
        return VerifyOutput(logits=logits, hidden=hidden, trees=tuple(trees))

    @staticmethod
    def _verified(state: BatchState, num_nodes: int, what: str) -> tuple[list[int], ...]:
        """The pending verify's parents, after checking ``num_nodes`` against its row count (the
        caller clears ``state.verified`` once its own checks passed, so a refused call can be retried)."""
        if state.verified is None:
            raise ValueError(f"{what}: no verify step awaits it (call verify() first; once per verify)")
        n, parents = state.verified
        if num_nodes != n:
            raise ValueError(f"{what}: num_nodes={num_nodes}, but the last verify appended 1 + {n} rows per request")
        return parents

    # ------------------------------------------------------------------ compaction
    @torch.inference_mode()
    def accept(self, state: BatchState, paths: Sequence[Sequence[int]], next_tokens: Sequence[int],
               num_nodes: int) -> None:
        """Keep the pending row and the accepted path's rows of the last verify; drop the rest.

        Args:
            paths: per request, accepted node indices root->leaf (may be empty).
            next_tokens: per request, the token emitted after the path (the new pending token).
            num_nodes: ``N``, the padded tree size of the last verify (the forward added ``1 + N`` rows).
        """
        B = state.batch_size
        if len(paths) != B or len(next_tokens) != B:
            raise ValueError(f"accept got {len(paths)} paths / {len(next_tokens)} tokens for {B} requests")
        next_tokens = as_token_list(next_tokens, "accept: next_tokens", self.vocab_size)
        parents = self._verified(state, num_nodes, "accept")
        for b, p in enumerate(paths):
            prev = -1
            for node in p:
                if not 0 <= node < len(parents[b]):
                    raise ValueError(f"accept: path node {node} of request {b} is outside the tree "
                                     f"({len(parents[b])} nodes, N={num_nodes})")
                if parents[b][node] != prev:
                    raise ValueError(f"accept: path {list(p)} of request {b} is not a root-to-node path "
                                     f"(node {node}'s parent is {parents[b][node]}, not {prev})")
                prev = node
        total = state.cache_len
        S = total - 1 - num_nodes
        if S < 0:
            raise ValueError(f"accept: cache has {total} rows, fewer than 1 + num_nodes={1 + num_nodes}")
        state.verified = None
        new_lengths = [L + 1 + len(p) for L, p in zip(state.lengths, paths)]
        new_total = max(new_lengths)
        # Only the kept rows move: request b's pending row (S) and path rows (S + 1 + node) go to
        # [L_b, L_b + 1 + len(p)). Rows of other requests and the prefix stay where they are, so the
        # cost is proportional to the accepted tokens, not to the cache's ragged tail.
        req, dst, src = [], [], []
        for b, (L, p) in enumerate(zip(state.lengths, paths)):
            for i, row in enumerate([S] + [S + 1 + node for node in p]):
                if L + i != row:
                    req.append(b), dst.append(L + i), src.append(row)
        if req:
            b_idx, d_idx, s_idx = (torch.tensor(v, device=self.device) for v in (req, dst, src))
            for layer in state.cache.layers:
                for name in ("keys", "values"):
                    t = getattr(layer, name)
                    t[b_idx, :, d_idx] = t[b_idx, :, s_idx]
        _truncate(state.cache, new_total)
        state.lengths = new_lengths
        state.pending = next_tokens

    def discard(self, state: BatchState, num_nodes: int) -> None:
        """Drop every row the last verify added (``1 + num_nodes``), e.g. after a timing run."""
        self._verified(state, num_nodes, "discard")
        state.verified = None
        _truncate(state.cache, state.cache_len - 1 - num_nodes)

    def set_pending(self, state: BatchState, tokens: Sequence[int]) -> None:
        """Set the pending token of each request (after prefill, the first emitted token)."""
        if len(tokens) != state.batch_size:
            raise ValueError(f"set_pending got {len(tokens)} tokens for {state.batch_size} requests")
        state.pending = as_token_list(tokens, "set_pending: tokens", self.vocab_size)

    @torch.inference_mode()
    def select(self, state: BatchState, rows: Sequence[int]) -> None:
        """Keep only the requests at ``rows`` (finished requests leave the batch)."""
        rows = list(rows)
        if not rows:
            raise ValueError("select needs at least one row to keep")
        if state.verified is not None:
            raise ValueError("select: a verify step's rows await accept() or discard()")
        index = torch.tensor(rows, device=self.device)
        for layer in state.cache.layers:
            layer.keys = layer.keys.index_select(0, index)
            layer.values = layer.values.index_select(0, index)
        state.lengths = [state.lengths[r] for r in rows]
        state.pending = [state.pending[r] for r in rows]
        _truncate(state.cache, max(state.lengths))


def _truncate(cache, length: int) -> None:
    """Keep the first ``length`` rows of every layer (sliced directly: ``DynamicCache.crop``'s
    argument changed meaning across transformers 5.x releases)."""
    for layer in cache.layers:
        if layer.keys.shape[-2] > length:
            layer.keys = layer.keys[:, :, :length]
            layer.values = layer.values[:, :, :length]
