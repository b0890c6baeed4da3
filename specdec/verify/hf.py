"""Run a Hugging Face causal LM over a batch of DraftTrees in one forward, and compact its KV cache.

Cache layout: :mod:`specdec.verify.cache`. A verify step feeds ``T = 1 + N`` tokens per request: the
pending token (last emitted, not yet cached) at position ``lengths[b]``, node ``i`` at
``lengths[b] + depth[i]``. The 4-D additive mask (:mod:`specdec.verify.masks`) is omitted when no row
needs it (no holes, equal chains: plain decoding runs ``model.generate``'s kernels).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

import torch

from .._imports import require_transformers
from ..checks import as_token_list
from ..ops.skinny_linear import lm_head_logits
from ..tree import DraftTree, pack_trees
from . import cache as kv
from .capabilities import inspect_model, tree_op_refusal
from .masks import (key_positions, model_masks, prefill_visibility, step_positions, step_visibility,
                    window_binds)
from .patch import ForwardPatch


@dataclass
class BatchState:
    """KV state of a batch between verify steps: ``cache`` (shared ``DynamicCache``), ``lengths``
    (committed rows per request), ``pending`` (emitted-but-uncached token per request, fed first next
    step), ``verified`` (``(N, parents per request)`` of the verify awaiting :meth:`HFTarget.commit` /
    :meth:`HFTarget.discard`, else None)."""

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
    """One verify forward: ``logits`` float32 ``[B, 1 + N, V]`` (row 0 after the prefix, ``1 + i``
    after node i), ``hidden`` ``[B, 1 + N, H]`` post-norm states (``[..., len * H]`` with
    ``hidden_layers``), ``trees`` (``len == B``)."""

    logits: torch.Tensor
    hidden: torch.Tensor
    trees: tuple[DraftTree, ...]


class HFTarget:
    """Adapter running a transformers ``*ForCausalLM`` as a speculative-decoding target.

    Args:
        model: a decoder-only causal LM in eval mode taking a prepared 4-D mask and ``position_ids``
            over a ``DynamicCache`` (checked by :func:`specdec.verify.capabilities.inspect_model`).
        attention: ``"mask"`` (the model's attention with a 4-D additive mask; SDPA runs grouped) or
            ``"tree_op"`` (specdec's tree-attention op via transformers' attention registry; a
            sliding layer whose window hides a key gets its dense mask). Both patch the model only
            during specdec's forwards (:mod:`specdec.verify.patch`).
        skinny_linear: route float32 CPU ``nn.Linear`` layers and the LM head through
            :func:`specdec.ops.skinny_linear` during specdec's forwards.
        hidden_layers: None: ``hidden`` is the final post-norm state; else ``output_hidden_states``
            indices whose states are concatenated (``[..., len * H]``, EAGLE-3's ``target_layers``).

    Raises:
        ValueError: naming the missing feature (see :mod:`specdec.verify.capabilities`), a
            ``torch.compile``'d model, ``attention="tree_op"`` for a model the op cannot run exactly
            (no attention-registry support, attention soft-capping), or an LM head whose logits the
            adapter does not reproduce.

    One thread at a time per HFTarget (``RuntimeError`` otherwise); HFTargets sharing a model may
    run in parallel threads.
    """

    def __init__(self, model, *, attention: str = "mask", skinny_linear: bool = True, hidden_layers=None):
        require_transformers("HFTarget")
        _refuse_compiled(model)
        if attention not in ("mask", "tree_op"):
            raise ValueError(f"attention must be 'mask' or 'tree_op', got {attention!r}")
        self.features = inspect_model(model)
        if attention == "tree_op":
            reason = tree_op_refusal(model, self.features)
            if reason:
                raise ValueError(f"attention='tree_op': {reason}; use attention='mask'")
        self.model = model.eval()
        self.config = model.config
        self.attention = attention
        self.base = getattr(model, model.base_model_prefix)
        self.lm_head = model.get_output_embeddings()
        self.vocab_size = int(self.lm_head.weight.shape[0])
        self.skinny_linear = bool(skinny_linear)
        self._patch = ForwardPatch(self.model, linears=self.base if self.skinny_linear else None,
                                   attention=self.features.attention_backend, tree_attention=attention == "tree_op")
        self.hidden_layers = None if hidden_layers is None else tuple(int(i) for i in hidden_layers)
        layers = self.features.num_layers
        if self.hidden_layers is not None and not all(0 <= i <= layers for i in self.hidden_layers):
            raise ValueError(f"hidden_layers {self.hidden_layers} must lie in [0, {layers}]")
        self._check_head()

    def with_hidden_layers(self, hidden_layers) -> "HFTarget":
        """The same model and settings, returning the concatenated ``hidden_layers`` states as ``hidden``."""
        return HFTarget(self.model, attention=self.attention, skinny_linear=self.skinny_linear,
                        hidden_layers=hidden_layers)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def max_positions(self) -> int | None:
        """The model's number of positions (``config.max_position_embeddings``), None when unlimited."""
        return self.features.max_positions

    # ------------------------------------------------------------------ forward helpers
    def _forward(self, input_ids, position_ids, mask, cache, rows=None, extra=None,
                 starts=None) -> tuple[torch.Tensor, torch.Tensor]:
        """One base-model forward: (float32 logits ``[B, T, V]``, or ``[B, V]`` at ``rows``
        (``LongTensor[B]``); hidden ``[B, T, H]``). ``starts``: row where each request's new K/V is
        written (None: appended). A forward that raises leaves the cache unchanged."""
        before = cache.rows
        cache.write_at(starts, input_ids.shape[1], self.device)
        try:
            with self._patch:
                out = self.base(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, cache=cache,
                                use_cache=True, output_hidden_states=self.hidden_layers is not None,
                                **(extra or {}))
            self._check_tree_calls(extra)
        except BaseException:
            kv.truncate(cache, before)
            raise
        finally:
            cache.done()
        hidden = out.last_hidden_state
        feats = hidden
        if self.hidden_layers is not None:
            feats = torch.cat([out.hidden_states[i] for i in self.hidden_layers], -1)
        if rows is not None:
            picked = hidden[torch.arange(hidden.shape[0], device=hidden.device), rows]
            return self._logits(picked), feats
        return self._logits(hidden), feats

    def _check_tree_calls(self, extra) -> None:
        """In tree-op mode every attention layer must have run specdec's attention function: a layer
        that bypassed it would have attended causally over the tree, silently wrong."""
        from ..ops.hf_attention import TREE_CALLS_KWARG

        calls = (extra or {}).get(TREE_CALLS_KWARG)
        if calls is not None and len(calls) != self.features.num_layers:
            raise RuntimeError(
                f"tree attention ran in {len(calls)} of {self.features.num_layers} layers of "
                f"{type(self.model).__name__}: its attention bypasses transformers' registry; "
                "use attention='mask'"
            )

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits ``[..., V]`` of final hidden states, with the head's own logit transform."""
        logits = (lm_head_logits(self.lm_head, hidden) if self.skinny_linear else self.lm_head(hidden)).float()
        if self.features.logit_scale != 1.0:
            logits = logits * self.features.logit_scale
        cap = self.features.final_softcap
        return torch.tanh(logits / cap) * cap if cap else logits

    @torch.inference_mode()
    def _check_head(self) -> None:
        """Refuse a model whose forward's logits differ from ``head(base(x))`` (an unknown logit
        transform would change every verified distribution); one one-token forward, no cache."""
        seen, me = [], threading.get_ident()  # other threads may be running the same model meanwhile
        hook = self.base.register_forward_hook(
            lambda module, args, out: seen.append(out.last_hidden_state) if threading.get_ident() == me else None
        )
        try:
            pad = getattr(self.config, "pad_token_id", None)  # a padding embedding may be all zeros
            token = next(t for t in range(3) if t != pad) % self.vocab_size
            own = (
                self.model(input_ids=torch.full((1, 1), token, device=self.device), use_cache=False)
                .logits[0, -1]
                .float()
            )
        finally:
            hook.remove()
        if not seen:  # the causal LM calls a submodule of the base model directly (OPT: model.decoder)
            seen.append(
                self.base(input_ids=torch.full((1, 1), token, device=self.device), use_cache=False).last_hidden_state
            )
        ours = self._logits(seen[-1][:, -1])[0]
        tol = max(1e-4, 8 * torch.finfo(self.dtype).eps) * (1.0 + float(own.abs().max()))
        diff = float((own - ours).abs().max())
        if not diff <= tol:
            raise ValueError(
                f"{type(self.model).__name__}'s own forward gives other logits than its LM head over the "
                f"base model's hidden states (max difference {diff:.3g} > {tol:.3g}): its head applies "
                "a transform HFTarget does not reproduce (known: soft-capping, logit scaling)"
            )

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        """bool ``[B, T, K]`` -> additive float mask ``[B, 1, T, K]`` in the model's dtype."""
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~allowed.to(self.device), torch.finfo(self.dtype).min)
        return mask.unsqueeze(1)

    def new_cache(self):
        """An empty cache of the layout this adapter needs (every layer keeps all rows)."""
        return kv.new_cache()

    # ------------------------------------------------------------------ positions
    def positions_left(self, state: "BatchState") -> list[int] | None:
        """Per request, how deep a tree may reach this step (the pending token takes position
        ``lengths[b]``, a node at depth ``d`` position ``lengths[b] + d``), or None without a limit."""
        if self.max_positions is None:
            return None
        return [self.max_positions - 1 - L for L in state.lengths]

    def fit_positions(self, state: "BatchState", trees: Sequence[DraftTree]) -> list[DraftTree]:
        """``trees`` cut to the depth each request's remaining positions allow (:meth:`DraftTree.cut`):
        a draft never reaches past the model's last position."""
        left = self.positions_left(state)
        return list(trees) if left is None else [t.cut(max(d, 0))[0] for t, d in zip(trees, left)]

    def check_room(self, prompt_lens: Sequence[int], max_new_tokens: int) -> None:
        """ValueError, before any model work, when ``len(prompt) + max_new_tokens - 1`` exceeds the
        model's positions (the last emitted token is never fed)."""
        if self.max_positions is None:
            return
        for i, n in enumerate(prompt_lens):
            need = n + max_new_tokens - 1
            if need > self.max_positions:
                fits = self.max_positions + 1 - n
                raise ValueError(
                    f"prompt {i} has {n} tokens; with max_new_tokens={max_new_tokens} it needs {need} positions, but "
                    f"{type(self.model).__name__} has {self.max_positions} (config.max_position_embeddings): "
                    + (f"use max_new_tokens <= {fits}" if fits >= 1 else "shorten the prompt")
                )

    def _check_prompt_positions(self, lens: list[int]) -> None:
        if self.max_positions is not None and max(lens) > self.max_positions:
            b = lens.index(max(lens))
            raise ValueError(
                f"prompt {b} has {lens[b]} tokens, more than the {self.max_positions} positions of "
                f"{type(self.model).__name__} (config.max_position_embeddings)"
            )

    # ------------------------------------------------------------------ prefill
    @torch.inference_mode()
    def prefill(self, prompts: Sequence[Sequence[int]]) -> tuple[BatchState, torch.Tensor, list[torch.Tensor]]:
        """Encode prompts (right-padded into one batch). Returns ``state`` (``lengths[b] =
        len(prompts[b])``, pending -1), ``logits`` float32 ``[B, V]`` after each prompt, and ``hidden``:
        per request ``[len(prompt), H]``."""
        if not prompts:
            raise ValueError("prefill needs at least one prompt")
        lens = [len(p) for p in prompts]
        if min(lens) == 0:
            raise ValueError("every prompt needs at least one token")
        for p in prompts:
            if min(p) < 0 or max(p) >= self.vocab_size:
                raise ValueError(f"prompt token ids must lie in [0, {self.vocab_size}), got range [{min(p)}, {max(p)}]")
        self._check_prompt_positions(lens)
        B, T = len(prompts), max(lens)
        ids = torch.zeros(B, T, dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, : lens[b]] = torch.as_tensor(list(p), dtype=torch.long)
        allowed, pos = prefill_visibility(lens)
        mask = model_masks(self.features, allowed, pos, pos, self._additive) if len(set(lens)) > 1 else None
        cache = self.new_cache()
        last = torch.tensor([n - 1 for n in lens], device=self.device)
        logits, hidden = self._forward(ids.to(self.device), pos.to(self.device), mask, cache, rows=last)
        state = BatchState(cache=cache, lengths=list(lens), pending=[-1] * B)
        return state, logits, [hidden[b, : lens[b]] for b in range(B)]

    # ------------------------------------------------------------------ verify
    def _tree_inputs(self, state: BatchState, trees: Sequence[DraftTree]):
        """Token ids and position ids ``[B, 1 + N]``, the mask argument (None, a 4-D mask or one per
        layer type) and extra forward kwargs (tree-op mode: the packed ancestor mask with the pending
        token as root, and each request's prefix length)."""
        batch = pack_trees(trees, device="cpu")  # index bookkeeping on the host; moved once below
        N, S = batch.max_nodes, state.cache_len
        lengths = torch.tensor(state.lengths, dtype=torch.long)
        ids = torch.cat([torch.tensor(state.pending, dtype=torch.long).unsqueeze(1), batch.tokens], dim=1)
        pos = step_positions(lengths, batch)
        self._check_step_positions(pos)
        no_holes = all(L == S for L in state.lengths)
        if no_holes and len(set(batch.sizes.tolist())) == 1 and all(t.is_chain for t in trees):
            return ids, pos, None, None
        binds = window_binds(self.features, pos)
        # A step without drafted nodes (plain decoding of a ragged batch) has no tree to attend: one
        # query row per request runs faster through SDPA with the dense mask (measured in docs/engine.md).
        if self.attention == "tree_op" and N and (not binds or self.features.mixed):
            from ..ops.hf_attention import tree_kwargs

            extra = tree_kwargs(
                batch.ancestor_mask.to(self.device),
                state.lengths,
                add_root_node=True,
                total_rows=S + 1 + N,
                windowed_masks=binds,
            )
            mask = None
            if binds:  # the sliding layers get their windowed masks, the full layers the op
                allowed = step_visibility(lengths, S, batch)
                mask = model_masks(
                    self.features, allowed, pos, key_positions(lengths, S, pos), self._additive, full_layers=False
                )
            return ids, pos, mask, extra
        allowed = step_visibility(lengths, S, batch)
        return ids, pos, model_masks(self.features, allowed, pos, key_positions(lengths, S, pos), self._additive), None

    def _check_step_positions(self, pos: torch.Tensor) -> None:
        if self.max_positions is not None and pos.numel() and int(pos.max()) >= self.max_positions:
            b = int((pos >= self.max_positions).any(dim=1).nonzero()[0])
            raise ValueError(
                f"request {b}'s tree reaches position {int(pos[b].max())}, past the last position "
                f"({self.max_positions - 1}) of {type(self.model).__name__}: cut it first "
                "(HFTarget.fit_positions)"
            )

    @torch.inference_mode()
    def verify(self, state: BatchState, trees: Sequence[DraftTree]) -> VerifyOutput:
        """One forward over the pending token and every node of ``trees[b]`` for each request ``b``;
        writes ``1 + N`` K/V rows per request: :meth:`commit` or :meth:`discard` them next."""
        if len(trees) != state.batch_size:
            raise ValueError(f"verify got {len(trees)} trees for a batch of {state.batch_size} requests")
        if min(state.pending) < 0:
            raise ValueError("verify needs a pending token per request: call commit() or set_pending() first")
        if state.verified is not None:
            raise ValueError("the previous verify step's rows are still in the cache: call commit() or discard() first")
        ids, pos, mask, extra = self._tree_inputs(state, trees)
        if ids.numel() and int(ids.max()) >= self.vocab_size:  # one check for every tree and pending token
            b = int((ids >= self.vocab_size).any(dim=1).nonzero()[0])
            raise ValueError(f"tree {b} has token id {int(ids[b].max())} >= vocab_size {self.vocab_size}")
        logits, hidden = self._forward(
            ids.to(self.device), pos.to(self.device), mask, state.cache, extra=extra, starts=state.lengths
        )
        state.verified = (ids.shape[1] - 1, tuple(t.parents.tolist() for t in trees))
        return VerifyOutput(logits=logits, hidden=hidden, trees=tuple(trees))

    @staticmethod
    def _verified(state: BatchState, what: str) -> tuple[int, tuple[list[int], ...]]:
        """``(N, parents)`` of the pending verify. The caller clears ``state.verified`` once its own
        checks passed, so a refused call can be retried."""
        if state.verified is None:
            raise ValueError(f"{what}: no verify step awaits it (call verify() first; once per verify)")
        return state.verified

    # ------------------------------------------------------------------ compaction
    def commit(
        self,
        state: BatchState,
        paths: Sequence[Sequence[int]],
        next_tokens: Sequence[int],
        *,
        validate: bool = True,
    ) -> None:
        """Keep the pending row and the accepted path's rows of the last verify, drop the rest.

        Args:
            paths: per request, accepted node indices root->leaf (may be empty).
            next_tokens: per request, the token emitted after the path (the new pending token).
            validate: check the paths against the verified trees and the tokens against the
                vocabulary; False only for values the engine's own sampler produced.
        """
        B = state.batch_size
        if len(paths) != B or len(next_tokens) != B:
            raise ValueError(f"commit got {len(paths)} paths / {len(next_tokens)} tokens for {B} requests")
        num_nodes, parents = self._verified(state, "commit")
        if validate:
            next_tokens = as_token_list(next_tokens, "commit: next_tokens", self.vocab_size)
            self._check_paths(paths, parents, num_nodes)
        self._compact(state, paths, list(next_tokens), num_nodes)

    @staticmethod
    def _check_paths(paths: Sequence[Sequence[int]], parents: tuple[list[int], ...], num_nodes: int) -> None:
        for b, p in enumerate(paths):
            prev = -1
            for node in p:
                if not 0 <= node < len(parents[b]):
                    raise ValueError(
                        f"commit: path node {node} of request {b} is outside the tree "
                        f"({len(parents[b])} nodes, N={num_nodes})"
                    )
                if parents[b][node] != prev:
                    raise ValueError(
                        f"commit: path {list(p)} of request {b} is not a root-to-node path "
                        f"(node {node}'s parent is {parents[b][node]}, not {prev})"
                    )
                prev = node

    @torch.inference_mode()
    def _compact(
        self, state: BatchState, paths: Sequence[Sequence[int]], next_tokens: list[int], num_nodes: int
    ) -> None:
        total = state.cache_len
        S = total - 1 - num_nodes
        if S < 0:
            raise ValueError(f"commit: cache has {total} rows, fewer than 1 + num_nodes={1 + num_nodes}")
        state.verified = None
        new_lengths = [L + 1 + len(p) for L, p in zip(state.lengths, paths)]
        new_total = max(new_lengths)
        # Only the kept rows move: request b's path rows (L_b + 1 + node) go to L_b + 1 + i, right behind
        # its pending row (L_b, already in place). Nothing else moves, so the cost is proportional to the
        # accepted tokens, not to the prefix or the holes.
        req, dst, src = [], [], []
        for b, (L, p) in enumerate(zip(state.lengths, paths)):
            for i, node in enumerate(p):
                if node != i:
                    req.append(b), dst.append(L + 1 + i), src.append(L + 1 + node)
        if req:
            kv.move_rows(state.cache, *(torch.tensor(v, device=self.device) for v in (req, dst, src)))
        kv.truncate(state.cache, new_total)
        state.lengths = new_lengths
        state.pending = next_tokens

    def discard(self, state: BatchState) -> None:
        """Drop every row the last verify added (``1 + N``), e.g. after a timing run."""
        num_nodes, _ = self._verified(state, "discard")
        state.verified = None
        kv.truncate(state.cache, state.cache_len - 1 - num_nodes)

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
            raise ValueError("select: a verify step's rows await commit() or discard()")
        kv.select(state.cache, torch.tensor(rows, device=self.device))
        state.lengths = [state.lengths[r] for r in rows]
        state.pending = [state.pending[r] for r in rows]
        kv.truncate(state.cache, max(state.lengths))


def _refuse_compiled(model) -> None:
    """Refuse a ``torch.compile``'d model (or compiled submodule): every step has a new shape, and
    the forward patch cannot reach modules a compiled wrapper hides."""
    from torch._dynamo.eval_frame import OptimizedModule

    compiled = (
        [name or "the model" for name, m in model.named_modules() if isinstance(m, OptimizedModule)]
        if isinstance(model, torch.nn.Module)
        else []
    )
    if compiled:
        raise ValueError(
            f"HFTarget does not take torch.compile'd models ({compiled[0]} is compiled): pass the "
            "uncompiled model (a compiled module keeps it as ._orig_mod)"
        )
