"""EAGLE-style proposer: one draft layer in feature space, EAGLE-2 dynamic trees within a node budget.

Per request the draft layer's KV cache holds, at position ``t``, the pair ``(f_t, x_{t+1})``: the
target's true feature and the next token (``commit`` appends ``(target_hidden[j], accepted_ids[j])``;
drafted features never enter it). Depth 1 is drafted from the root feature: the target's last prompt
feature after ``begin``, the layer's output at the last committed pair after ``commit``. Committed
pairs are queued and fed in one causal pass when the request next drafts (or its cache is read, or
:data:`MAX_QUEUED` wait), so a request that skips drafting pays nothing per step.

EAGLE-2 drafting: depth 1 is the root's ``top_k`` tokens; each further depth expands the ``top_k``
frontier nodes of highest cumulative draft probability in one batch (tree mask over cache plus
ancestors), until ``max_depth``, ``min_prob`` or no candidate can still be selected. The tree is the
``budget`` best candidates (ties to the earlier node, so parents are kept). Nodes are point masses:
verification is exact at any temperature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Sequence

import torch

from ..artifacts import Manifest, check_compatible, load_artifact, target_fingerprint
from ..verify.patch import ForwardPatch
from ..tree import DraftTree
from ..checks import as_token_list, normalize_budgets
from .base import ScoredDraft
from .eagle3_layer import Eagle3Config, Eagle3Layer
from .eagle_layer import EagleConfig, EagleLayer
from .reduced_vocab import DraftHead

ARCHITECTURES = {"eagle": (EagleConfig, EagleLayer), "eagle3": (Eagle3Config, Eagle3Layer)}

#: Most committed pairs a request queues before they are fed anyway. A queued pair holds its target
#: features (EAGLE-3: 3 x 576 floats, 4.6x its draft K/V), so a long prompt that never drafts would
#: otherwise hold several times its cache; 512 rows still make one efficient pass.
MAX_QUEUED = 512


@dataclass
class _Request:
    """One request's committed draft state: cache rows ``[0, length)``, the root feature, and the
    committed pairs not fed yet (``pending_*``: features ``[n_j, F]`` and their tokens)."""

    k: torch.Tensor  # [capacity, Hkv, D]
    v: torch.Tensor
    length: int
    root: torch.Tensor | None  # [H]; None while nothing can be drafted yet (EAGLE-3 after a 1-token prompt)
    pending_h: list[torch.Tensor] = field(default_factory=list)
    pending_ids: list[int] = field(default_factory=list)
    root_from_feed: bool = True  # the next feed's last output becomes the root (False: EAGLE-1 after begin)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        n = k.shape[0]
        if self.length + n > self.k.shape[0]:
            cap = max(2 * self.k.shape[0], self.length + n, 16)
            grow = lambda t: torch.cat([t[: self.length], t.new_empty(cap - self.length, *t.shape[1:])])
            self.k, self.v = grow(self.k), grow(self.v)
        self.k[self.length: self.length + n] = k
        self.v[self.length: self.length + n] = v
        self.length += n

    @property
    def nbytes(self) -> int:
        root = 0 if self.root is None else self.root.numel() * self.root.element_size()
        pending = sum(h.numel() * h.element_size() for h in self.pending_h) + 8 * len(self.pending_ids)
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size() + root + pending


#: The options an EAGLE artifact's ``config["drafting"]`` may set (any other is refused by name).
DRAFT_OPTIONS = ("top_k", "max_depth", "min_prob", "head_dtype")


class EagleProposer:
    """Drafts EAGLE-2 dynamic trees from a trained :class:`EagleLayer`.

    Args:
        layer: the trained draft layer.
        embed_weight: the target's input embedding ``[V, H]`` (shared, not copied).
        lm_head_weight: the target's LM-head weight ``[V, H]`` (shared, not copied).
        artifact: the manifest-derived :class:`~specdec.Artifact` (bound to the target).
        top_k: children per expanded node and frontier width per depth.
        max_depth: deepest drafted level.
        min_prob: stop expanding when the best frontier path probability falls below this.
        head_dtype: how the drafting vocabulary's LM-head rows are held
            (:class:`~specdec.proposers.reduced_vocab.DraftHead`; default: float16 for a reduced vocabulary).
    """

    requires_target_hidden = True

    def __init__(self, layer: EagleLayer | Eagle3Layer, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor,
                 artifact, *,
                 top_k: int = 8, max_depth: int = 6, min_prob: float = 1e-3, head_dtype: str | None = None):
        H = layer.hidden_size
        for name, w in (("embed_weight", embed_weight), ("lm_head_weight", lm_head_weight)):
            if w.dim() != 2 or w.shape[1] != H:
                raise ValueError(f"{name} must be [V, {H}], got {tuple(w.shape)}")
        if embed_weight.shape[0] != lm_head_weight.shape[0]:
            raise ValueError(f"embedding ({embed_weight.shape[0]}) and LM head ({lm_head_weight.shape[0]}) "
                             "vocabularies differ")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth must be an int >= 1, got {max_depth!r}")
        if not 0.0 <= float(min_prob) < 1.0:
            raise ValueError(f"min_prob must be in [0, 1), got {min_prob!r}")
        self.layer = layer.to(lm_head_weight.device, lm_head_weight.dtype).eval()
        self.embed = embed_weight.detach()
        self.lm_weight = lm_head_weight.detach()
        self.head = DraftHead(self.lm_weight, self.layer.vocab_ids, head_dtype)  # [R, H], gathered once
        # Drafting feeds a few rows at a time: the layer's products go through the skinny kernel on CPU,
        # reading fp16 copies of the weights an fp16 artifact stored (the same products, half the bytes).
        self._linears = ForwardPatch(self.layer, linears=self.layer, attention=False, half_weights=True)
        self.vocab_size = int(lm_head_weight.shape[0])
        self.top_k = min(top_k, int(self.head.rows.shape[0]))
        self.max_depth, self.min_logp = max_depth, (math.log(min_prob) if min_prob > 0 else -math.inf)
        self.artifact = artifact
        # Which target hidden states feed the layer: None = the final one (EAGLE-1), else the fused
        # hidden-state indices the decoder must ask its HFTarget for (EAGLE-3).
        self.target_layers = getattr(layer.config, "target_layers", None)
        self._reqs: dict[Hashable, _Request] = {}

    @classmethod
    def load(cls, directory: str, target_model, *, allow_mismatch: bool = False, **draft_options) -> "EagleProposer":
        """Load a ``specdec train eagle`` artifact (another checkpoint is refused unless overridden);
        ``draft_options`` (:data:`DRAFT_OPTIONS`, None: not given) override ``config["drafting"]``."""
        tensors, manifest = load_artifact(directory)
        if manifest.kind != "eagle":
            raise ValueError(f"{directory} holds a {manifest.kind!r} artifact, not 'eagle'")
        check_compatible(manifest, target_fingerprint(target_model), allow_mismatch=allow_mismatch)
        return cls.from_manifest(tensors, manifest, target_model.get_input_embeddings().weight,
                                 target_model.get_output_embeddings().weight, **draft_options)

    @classmethod
    def from_manifest(cls, tensors, manifest: Manifest, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor,
                      **draft_options) -> "EagleProposer":
        if "layer" not in manifest.config:
            raise ValueError(f"EAGLE manifest {manifest.name!r} has no config['layer'] (the draft layer's shape)")
        arch = manifest.config.get("architecture", "eagle")
        if arch not in ARCHITECTURES:
            raise ValueError(f"EAGLE manifest {manifest.name!r} names architecture {arch!r}; "
                             f"known: {sorted(ARCHITECTURES)}")
        config_cls, layer_cls = ARCHITECTURES[arch]
        cfg = config_cls.from_dict(manifest.config["layer"])
        if cfg.hidden_size != lm_head_weight.shape[1]:
            raise ValueError(f"artifact hidden size {cfg.hidden_size} != target hidden size {lm_head_weight.shape[1]}")
        opts = manifest.drafting_options(DRAFT_OPTIONS, draft_options)  # refused before the layer is built
        layer = layer_cls.from_tensors(tensors, cfg, lm_head_weight.dtype)
        return cls(layer, embed_weight, lm_head_weight, manifest.to_artifact(), **opts)

    # ------------------------------------------------------------------ lifecycle
    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None) -> None:
        if req_id in self._reqs:
            raise ValueError(f"request {req_id!r} already begun")
        ids = as_token_list(prompt_ids, "prompt_ids", self.vocab_size)
        if not ids:
            raise ValueError("begin needs a non-empty prompt (its last feature drafts the first token)")
        h = self._check_hidden(target_hidden, len(ids), "begin", "prompt_ids")
        c = self.layer.config
        empty = h.new_empty(0, c.num_kv_heads, c.head_dim)
        req = _Request(empty, empty.clone(), 0, None)
        if len(ids) > 1:
            # A copy: a view would keep the whole batch's prefill hidden states alive until the feed.
            req.pending_h.append(h[:-1].clone())
            req.pending_ids.extend(ids[1:])
        if self.layer.kind == "eagle":
            req.root = h[-1].clone()  # EAGLE-1 reads post-norm features: the target's own last one drafts depth 1
            req.root_from_feed = False
        # EAGLE-3: its output at the last prompt pair predicts the next token (set by the feed).
        if len(req.pending_ids) >= MAX_QUEUED:
            self._flush(req)
        self._reqs[req_id] = req

    @torch.no_grad()
    def commit(self, req_id, accepted_ids, *, target_hidden=None) -> None:
        req = self._state(req_id)
        ids = as_token_list(accepted_ids, "accepted_ids", self.vocab_size)
        if not ids:
            raise ValueError("commit needs at least one emitted token")
        h = self._check_hidden(target_hidden, len(ids), "commit", "accepted_ids")
        req.pending_h.append(h.clone())  # the caller's rows may be a view of a whole step's hidden states
        req.pending_ids.extend(ids)
        req.root_from_feed = True
        if len(req.pending_ids) >= MAX_QUEUED:
            self._flush(req)

    def _flush(self, req: _Request) -> _Request:
        """Feed the request's queued pairs through the draft layer (one pass) into its cache."""
        if req.pending_ids:
            feats = req.pending_h[0] if len(req.pending_h) == 1 else torch.cat(req.pending_h)
            k, v, out = self._feed(req, feats, req.pending_ids)
            req.append(k, v)
            if req.root_from_feed:
                req.root = out[-1]
            req.pending_h, req.pending_ids = [], []
        return req

    def end(self, req_id) -> None:
        self._state(req_id)
        del self._reqs[req_id]

    def memory_bytes(self) -> int:
        """Draft-layer weights (with fp16 copies), reduced-vocabulary head rows, and every request's
        draft KV cache and queued pairs (the target's head and embedding are not counted)."""
        own = sum(p.numel() * p.element_size() for p in self.layer.parameters()) + self._linears.extra_bytes
        if self.layer.vocab_ids is not None:
            own += self.layer.vocab_ids.numel() * 8 + self.head.nbytes
        return own + sum(r.nbytes for r in self._reqs.values())

    def cache_length(self, req_id) -> int:
        """Committed positions in the request's draft cache (committed tokens - 1), queued pairs fed."""
        return self._flush(self._state(req_id)).length

    def cached_kv(self, req_id) -> tuple[torch.Tensor, torch.Tensor]:
        """``(k, v) [length, Hkv, D]``: the request's committed draft keys/values (views), queued pairs fed."""
        r = self._flush(self._state(req_id))
        return r.k[: r.length], r.v[: r.length]

    def feed_queued(self, req_id) -> None:
        """Feed the request's queued pairs now (so a first draft can be timed without them)."""
        self._flush(self._state(req_id))

    def root(self, req_id) -> torch.Tensor | None:
        """``[H]``: the feature depth 1 is drafted from (None while nothing can be drafted), queued pairs fed."""
        return self._flush(self._state(req_id)).root

    def pending(self, req_id) -> int:
        """Committed tokens queued for the request's next feed."""
        return len(self._state(req_id).pending_ids)

    def _state(self, req_id) -> _Request:
        if req_id not in self._reqs:
            raise KeyError(f"unknown request {req_id!r}: call begin() first")
        return self._reqs[req_id]

    def _check_hidden(self, target_hidden, n: int, where: str, what: str) -> torch.Tensor:
        H = self.layer.feature_width
        if target_hidden is None:
            raise ValueError(f"EagleProposer.{where} needs target_hidden (requires_target_hidden is True)")
        if not isinstance(target_hidden, torch.Tensor) or target_hidden.dim() != 2 or target_hidden.shape[1] != H:
            shape = tuple(target_hidden.shape) if isinstance(target_hidden, torch.Tensor) else type(target_hidden)
            raise ValueError(f"{where} target_hidden must be [len({what}), {H}], got {shape}")
        if target_hidden.shape[0] != n:
            raise ValueError(f"{where} target_hidden has {target_hidden.shape[0]} rows for {n} tokens in {what}")
        return target_hidden.detach().to(self.lm_weight.device, self.lm_weight.dtype)

    @torch.no_grad()
    def _feed(self, req: _Request, feats: torch.Tensor, tokens: list[int]):
        """Run committed pairs ``(feats[j], tokens[j])`` at positions ``length + j`` (causal among
        themselves, full attention to the cache). Returns ``(k, v, out)``; the cache is not changed."""
        n, S = len(tokens), req.length
        dev = feats.device
        ids = torch.tensor(tokens, dtype=torch.long, device=dev)
        pos = torch.arange(S, S + n, device=dev)
        mask = torch.ones(n, S + n, dtype=torch.bool, device=dev)
        mask[:, S:] = torch.ones(n, n, dtype=torch.bool, device=dev).tril()
        with self._linears:
            out, k, v = self.layer.step(self.layer.embed_features(feats), self.embed[ids], pos, req.k[:S],
                                        req.v[:S], mask)
        return k, v, out

    # ------------------------------------------------------------------ drafting
    @torch.no_grad()
    def propose(self, req_ids: Sequence[Hashable], budget) -> list[DraftTree]:
        return [d.tree for d in self.propose_scored(req_ids, budget)]

    @torch.no_grad()
    def propose_scored(self, req_ids: Sequence[Hashable], budget) -> list[ScoredDraft]:
        """Like :meth:`propose`, with each node's cumulative draft probability as its acceptance
        estimate (draft confidence tracks acceptance; the decoder calibrates it)."""
        budgets = normalize_budgets(req_ids, budget)
        out = []
        for req_id, b in zip(req_ids, budgets):
            tree, logp = self._draft(self._state(req_id), b)
            probs = logp.exp().float().cpu()
            out.append(ScoredDraft(tree, probs, float(probs.sum())))
        return out

    @torch.no_grad()
    def _draft(self, req: _Request, budget: int) -> tuple[DraftTree, torch.Tensor]:
        """One request's EAGLE-2 tree (see the module docstring) and each node's cumulative draft
        log-probability ``[n]``."""
        dev = self.lm_weight.device
        if budget == 0 or self._flush(req).root is None:  # an empty ask leaves the queue queued
            return DraftTree.empty(dev, vocab_size=self.vocab_size), torch.zeros(0, device=dev)
        k = min(self.top_k, budget)
        logp = torch.log_softmax(self._logits(req.root[None])[0], -1)
        top = torch.topk(logp, k)
        # Candidates (drafting-vocab index, parent candidate, cumulative log-prob), in creation order.
        cand_tok, cand_par, cand_score = [top.indices], [torch.full((k,), -1, device=dev)], [top.values]
        n_cand = k
        # Frontier: candidates to expand next, with their parent's feature and their depth-1 position.
        front = torch.arange(k, device=dev)
        front_feat = req.root.expand(k, -1)
        front_score = top.values
        front_anc = torch.zeros(k, 0, dtype=torch.bool, device=dev)  # ancestors among expanded nodes
        tree_k = req.k.new_empty(0, *req.k.shape[1:])
        tree_v = req.v.new_empty(0, *req.v.shape[1:])
        S = req.length
        for depth in range(1, self.max_depth):
            best = float(front_score.max())
            kept_scores = torch.cat(cand_score)
            if best < self.min_logp or (n_cand >= budget and float(torch.topk(kept_scores, budget).values[-1]) >= best):
                break
            toks = self.layer.token_ids(torch.cat(cand_tok)[front])
            n_exp, f = tree_k.shape[0], front.numel()
            mask = torch.ones(f, S + n_exp + f, dtype=torch.bool, device=dev)
            mask[:, S: S + n_exp] = front_anc
            mask[:, S + n_exp:] = torch.eye(f, dtype=torch.bool, device=dev)
            pos = torch.full((f,), S + depth - 1, dtype=torch.long, device=dev)
            past_k, past_v = torch.cat([req.k[:S], tree_k]), torch.cat([req.v[:S], tree_v])
            with self._linears:
                out, nk, nv = self.layer.step(front_feat, self.embed[toks], pos, past_k, past_v, mask)
            tree_k, tree_v = torch.cat([tree_k, nk]), torch.cat([tree_v, nv])
            child_logp = torch.log_softmax(self._logits(out), -1)  # [f, R]
            ck = torch.topk(child_logp, k, dim=-1)
            scores = (front_score[:, None] + ck.values).reshape(-1)  # [f * k]
            parents = front.repeat_interleave(k)
            cand_tok.append(ck.indices.reshape(-1))
            cand_par.append(parents)
            cand_score.append(scores)
            # The next frontier: the best k children; each attends to its parent's ancestors + parent.
            nxt = torch.topk(scores, min(k, scores.numel())).indices
            own = torch.zeros(f, n_exp + f, dtype=torch.bool, device=dev)
            own[:, :n_exp] = front_anc
            own[:, n_exp:] = torch.eye(f, dtype=torch.bool, device=dev)
            front_anc = own[nxt // k]
            front_feat = out[nxt // k]
            front = n_cand + nxt
            front_score = scores[nxt]
            n_cand += scores.numel()
        return self._select(torch.cat(cand_tok), torch.cat(cand_par), torch.cat(cand_score), budget)

    def _logits(self, out: torch.Tensor) -> torch.Tensor:
        """Layer outputs ``[n, H]`` -> float32 drafting-vocabulary logits ``[n, R]``."""
        return self.head.logits(self.layer.head_input(out)).float()

    def _select(self, tok: torch.Tensor, par: torch.Tensor, score: torch.Tensor, budget: int
                ) -> tuple[DraftTree, torch.Tensor]:
        """The ``budget`` best candidates (ties to the earlier one), renumbered in creation order,
        with their scores."""
        sc = score.tolist()
        order = sorted(range(len(sc)), key=lambda i: (-sc[i], i))[:budget]
        keep = sorted(order)
        new = {old: i for i, old in enumerate(keep)}
        par_l = par.tolist()
        parents = [new[par_l[i]] if par_l[i] >= 0 else -1 for i in keep]
        idx = torch.tensor(keep, dtype=torch.long, device=tok.device)
        tokens = self.layer.token_ids(tok[idx])
        tree = DraftTree.trusted(tokens, torch.tensor(parents, dtype=torch.int32, device=tok.device),
                                 torch.ones(len(keep), dtype=torch.bool, device=tok.device),
                                 vocab_size=self.vocab_size)
        return tree, score[idx]

    def scored(self, req_id, budget: int) -> tuple[DraftTree, torch.Tensor]:
        """``(tree, path_probs [n])`` for one request (tests and analysis)."""
        req = self._state(req_id)
        tree, _ = self._draft(req, budget)
        return tree, self._path_probs(req, tree)

    @torch.no_grad()
    def _path_probs(self, req: _Request, tree: DraftTree) -> torch.Tensor:
        """``float64 [n]`` cumulative draft probabilities recomputed one node per forward, independent
        of the batched bookkeeping (a test reference)."""
        self._flush(req)
        n, dev, S = tree.num_nodes, self.lm_weight.device, req.length
        par = tree.parents.tolist()
        ids = self.layer.token_ids(torch.arange(self.head.rows.shape[0], device=dev)).tolist()
        reduced = {int(t): i for i, t in enumerate(ids)}
        anc = tree.dense_ancestor_mask.to(dev)
        ks, vs, outs = [], [], []
        cum = torch.zeros(n, dtype=torch.float64)
        for i in range(n):
            feat = req.root if par[i] < 0 else outs[par[i]]
            lp = torch.log_softmax((self.head.rows @ self.layer.head_input(feat)).float(), -1)
            cum[i] = (0.0 if par[i] < 0 else cum[par[i]]) + float(lp[reduced[int(tree.tokens[i])]])
            mask = torch.cat([torch.ones(1, S, dtype=torch.bool, device=dev), anc[i : i + 1, : i + 1]], 1)
            past_k = torch.cat([req.k[:S], *[k[None] for k in ks]])
            past_v = torch.cat([req.v[:S], *[v[None] for v in vs]])
            pos = torch.tensor([S + int(tree.depth[i]) - 1], device=dev)
            out, k, v = self.layer.step(
                feat[None], self.embed[tree.tokens[i : i + 1].to(dev)], pos, past_k, past_v, mask
            )
            ks.append(k[0]), vs.append(v[0]), outs.append(out[0])
        return cum.exp()
