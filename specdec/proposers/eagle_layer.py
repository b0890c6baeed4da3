"""The EAGLE draft layer: ``fc(concat(f_t, e_{t+1}))`` through one Llama-style decoder layer.

EAGLE (Li et al. 2024) drafts in feature space: ``fc`` projects the target's post-norm feature ``f_t``
concatenated with the next token's embedding ``e_{t+1}`` to ``H``; one decoder layer (RMSNorm, GQA with
RoPE over the draft's own KV cache, SwiGLU) predicts ``f_{t+1}``, scored by the target's frozen LM head
with no extra norm. Embedding and head belong to the target and are not stored. Plain torch, because
drafting needs an explicit tree mask over the draft cache (training shares :meth:`EagleLayer.qkv` and
:meth:`EagleLayer.finish`). ``vocab_ids`` (FR-Spec) narrows what is drafted, never what is verified.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .reduced_vocab import check_vocab_ids, lm_rows


@dataclass(frozen=True)
class EagleConfig:
    """Shape of the draft layer (derived from the target's config, stored in the manifest)."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self):
        for name in ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"EagleConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")

    @classmethod
    def from_target(cls, config) -> "EagleConfig":
        """The target's layer shape (a Llama-family HF config): same heads, head size, MLP width, RoPE."""
        H = int(config.hidden_size)
        heads = int(config.num_attention_heads)
        rope = getattr(config, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(config, "rope_theta", 10000.0))
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"EAGLE layer supports only default RoPE, target uses {rope.get('rope_type')!r}")
        return cls(hidden_size=H, num_heads=heads,
                   num_kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
                   head_dim=int(getattr(config, "head_dim", None) or H // heads),
                   intermediate_size=int(getattr(config, "intermediate_size", None) or 4 * H),
                   rms_eps=float(getattr(config, "rms_norm_eps", 1e-5)), rope_theta=float(theta))

    @classmethod
    def from_dict(cls, d: dict) -> "EagleConfig":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One fused op: a draft step of a few rows is bound by op count.
        if x.dtype == self.weight.dtype == torch.float32:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def rope_tables(positions: torch.Tensor, dim: int, theta: float, dtype: torch.dtype):
    """``(cos, sin)``, each ``[T, 1, dim]``, for ``positions [T]`` (computed once per step, shared by q and k)."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) / dim))
    ang = positions.to(torch.float32)[:, None] * inv[None]  # [T, D/2]
    ang = torch.cat([ang, ang], -1)[:, None]  # [T, 1, D]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [..., T, heads, D]`` by :func:`rope_tables` (Llama's half-split rotary embedding)."""
    D = x.shape[-1]
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class EagleLayer(nn.Module):
    """``fc`` + one decoder layer; see the module docstring.

    Args:
        config: :class:`EagleConfig`.
        vocab_ids: optional ``LongTensor[R]`` of the token ids drafted (reduced vocabulary).
    """

    def __init__(self, config: EagleConfig, vocab_ids: torch.Tensor | None = None):
        super().__init__()
        c = config
        self.config = c
        H, D = c.hidden_size, c.head_dim
        self.fc = nn.Linear(2 * H, H, bias=True)
        self.input_norm = RMSNorm(H, c.rms_eps)
        self.q_proj = nn.Linear(H, c.num_heads * D, bias=False)
        self.k_proj = nn.Linear(H, c.num_kv_heads * D, bias=False)
        self.v_proj = nn.Linear(H, c.num_kv_heads * D, bias=False)
        self.o_proj = nn.Linear(c.num_heads * D, H, bias=False)
        self.post_norm = RMSNorm(H, c.rms_eps)
        self.gate_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, H, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        self.register_buffer("vocab_ids", check_vocab_ids(vocab_ids), persistent=False)

    kind = "eagle"

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    @property
    def feature_width(self) -> int:
        """Width of the target features this layer reads (EAGLE-1: the final hidden state, ``H``)."""
        return self.config.hidden_size

    def embed_features(self, feats: torch.Tensor) -> torch.Tensor:
        """Target features -> the layer's input feature (EAGLE-1 reads them as they are)."""
        return feats

    def head_input(self, out: torch.Tensor) -> torch.Tensor:
        """Layer output -> what the LM-head rows score (EAGLE-1 regresses onto post-norm features: as is)."""
        return out

    # ------------------------------------------------------------------ shared pieces
    def qkv(self, feats: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor):
        """``feats, embeds [..., T, H]``, ``positions [T]`` -> ``(x, q [..., T, Hq, D], k, v [..., T, Hkv, D])``;
        ``x = fc(concat(f, e))`` is the residual stream, ``q``/``k`` carry RoPE."""
        c = self.config
        x = self.fc(torch.cat([feats, embeds], -1))
        h = self.input_norm(x)
        shape = h.shape[:-1]
        q = self.q_proj(h).view(*shape, c.num_heads, c.head_dim)
        k = self.k_proj(h).view(*shape, c.num_kv_heads, c.head_dim)
        v = self.v_proj(h).view(*shape, c.num_kv_heads, c.head_dim)
        cos, sin = rope_tables(positions, c.head_dim, c.rope_theta, q.dtype)
        return x, apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Residual stream ``x [..., H]`` + attention output ``[..., Hq * D]`` -> predicted feature."""
        x = x + self.o_proj(attn)
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    def _groups(self) -> int:
        return self.config.num_heads // self.config.num_kv_heads

    # ------------------------------------------------------------------ training: whole sequences
    def forward(self, feats: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """Teacher-forced causal pass: ``feats, embeds [B, T, H]`` -> predicted features ``[B, T, H]``
        (positions ``0..T-1``; right padding never leaks into real positions)."""
        B, T, _ = feats.shape
        pos = torch.arange(T, device=feats.device)
        x, q, k, v = self.qkv(feats, embeds, pos)
        g = self._groups()
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, D]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.finish(x, attn.transpose(1, 2).reshape(B, T, -1))

    # ------------------------------------------------------------------ drafting: cache + tree mask
    def step(self, feats: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor, past_k: torch.Tensor,
             past_v: torch.Tensor, mask: torch.Tensor):
        """``N`` new positions (``feats, embeds [N, H]``, ``positions`` long ``[N]``) over cached
        ``past_k, past_v [S, Hkv, D]`` under ``mask`` bool ``[N, S + N]`` (row ``i`` sees cache row
        ``j < S`` or new position ``j - S``; each row must allow itself). Returns ``(out [N, H],
        k [N, Hkv, D], v [N, Hkv, D])``."""
        N = feats.shape[0]
        x, q, k, v = self.qkv(feats, embeds, positions)
        # Grouped heads read their K/V head in place (enable_gqa), not a num_heads-wide copy of the cache,
        # and the inputs are 4-D: torch 2.13's CPU SDPA takes its fused kernel for [B, H, T, D] only
        # (3-D inputs fell back to the unfused math path, 3.8x slower at 400 cached rows).
        keys = torch.cat([past_k, k], 0).transpose(0, 1)[None]  # [1, Hkv, S+N, D]
        vals = torch.cat([past_v, v], 0).transpose(0, 1)[None]
        attn = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys, vals, attn_mask=mask[None, None],
                                              enable_gqa=True)[0]  # [Hq, N, D]
        return self.finish(x, attn.transpose(0, 1).reshape(N, -1)), k, v

    # ------------------------------------------------------------------ vocabulary, persistence
    def lm_rows(self, lm_weight: torch.Tensor) -> torch.Tensor:
        """The LM-head rows drafted: ``[R, H]`` (reduced) or ``[V, H]``."""
        return lm_rows(lm_weight, self.vocab_ids)

    def token_ids(self, idx: torch.Tensor) -> torch.Tensor:
        """Drafting-vocabulary indices -> token ids."""
        return idx if self.vocab_ids is None else self.vocab_ids.to(idx.device)[idx]

    def state_tensors(self, dtype: torch.dtype | None = torch.float16) -> dict[str, torch.Tensor]:
        """Tensors to save (weights cast to ``dtype`` to keep the artifact small); no target tensors."""
        out = {k: (v.to(dtype) if dtype is not None else v) for k, v in self.state_dict().items()}
        if self.vocab_ids is not None:
            out["vocab_ids"] = self.vocab_ids
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], config: EagleConfig,
                     dtype: torch.dtype = torch.float32) -> "EagleLayer":
        """Rebuild from :meth:`state_tensors` output, with weights in ``dtype`` (the target's)."""
        layer = cls(config, tensors.get("vocab_ids"))
        weights = {k: v.to(dtype) for k, v in tensors.items() if k != "vocab_ids"}
        missing, unexpected = layer.load_state_dict(weights, strict=False)
        if missing or unexpected:
            raise ValueError(f"EAGLE weights do not match the config: missing {missing}, unexpected {unexpected}")
        return layer.to(dtype)
