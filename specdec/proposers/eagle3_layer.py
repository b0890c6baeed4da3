"""The EAGLE-3 draft layer: fused low/middle/high target features, trained on its own predictions.

Unlike EAGLE-1 (:mod:`.eagle_layer`), after EAGLE-3 (Li et al. 2025): ``fc: Linear(F*H -> H)`` fuses
the hidden states entering ``F`` target layers (low, middle, high) into ``g_t``, since lower layers
still carry what comes after the next token; QKV read ``concat(norm(e_{t+1}), norm(g_t))`` (``2H``);
no feature regression: the output only has to score well through the layer's final norm and the
target's LM-head rows, and deeper steps read the layer's own output in place of ``g``. Drafting is
shared with EAGLE-1 through :meth:`embed_features` and :meth:`head_input`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .eagle_layer import EagleConfig, EagleLayer, RMSNorm, apply_rope, rope_tables
from .reduced_vocab import check_vocab_ids


def default_feature_layers(num_layers: int) -> tuple[int, ...]:
    """Low, middle and high hidden states (EAGLE-3's choice for Llama models: inputs of layers
    2, n/2, n-3), as indices into ``output_hidden_states`` (0 = the embeddings)."""
    if num_layers < 4:
        raise ValueError(f"fused features need a target with >= 4 layers, got {num_layers}")
    return (2, num_layers // 2, num_layers - 3)


@dataclass(frozen=True)
class Eagle3Config(EagleConfig):
    """:class:`EagleConfig` plus the fused target layers (``hidden_states`` indices)."""

    target_layers: tuple[int, ...] = (2, 15, 27)

    def __post_init__(self):
        super().__post_init__()
        layers = tuple(int(i) for i in self.target_layers)
        if not layers or len(set(layers)) != len(layers) or min(layers) < 0:
            raise ValueError(f"Eagle3Config.target_layers must be distinct indices >= 0, got {self.target_layers}")
        object.__setattr__(self, "target_layers", layers)

    @classmethod
    def from_target(cls, config, target_layers=None) -> "Eagle3Config":
        base = EagleConfig.from_target(config)
        if target_layers is None:
            target_layers = default_feature_layers(int(config.num_hidden_layers))
        return cls(**base.to_dict(), target_layers=tuple(target_layers))

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["target_layers"] = list(self.target_layers)
        return d


class Eagle3Layer(EagleLayer):
    """``fc`` fusing ``F`` target features + one decoder layer with 2H-wide QKV + final norm.

    Args:
        config: :class:`Eagle3Config`.
        vocab_ids: optional ``LongTensor[R]`` drafting vocabulary.
    """

    kind = "eagle3"

    def __init__(self, config: Eagle3Config, vocab_ids: torch.Tensor | None = None):
        nn.Module.__init__(self)
        c = config
        self.config = c
        H, D, Fn = c.hidden_size, c.head_dim, len(c.target_layers)
        self.fc = nn.Linear(Fn * H, H, bias=False)
        self.embed_norm = RMSNorm(H, c.rms_eps)
        self.hidden_norm = RMSNorm(H, c.rms_eps)
        self.q_proj = nn.Linear(2 * H, c.num_heads * D, bias=False)
        self.k_proj = nn.Linear(2 * H, c.num_kv_heads * D, bias=False)
        self.v_proj = nn.Linear(2 * H, c.num_kv_heads * D, bias=False)
        self.o_proj = nn.Linear(c.num_heads * D, H, bias=False)
        self.post_norm = RMSNorm(H, c.rms_eps)
        self.gate_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(H, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, H, bias=False)
        self.final_norm = RMSNorm(H, c.rms_eps)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        self.register_buffer("vocab_ids", check_vocab_ids(vocab_ids), persistent=False)

    @property
    def feature_width(self) -> int:
        return len(self.config.target_layers) * self.config.hidden_size

    def embed_features(self, fused: torch.Tensor) -> torch.Tensor:
        """Target features ``[..., F*H]`` -> the layer's input feature ``g [..., H]``."""
        return self.fc(fused)

    def head_input(self, out: torch.Tensor) -> torch.Tensor:
        """Layer output ``[..., H]`` -> what the LM-head rows score (the layer's own final norm)."""
        return self.final_norm(out)

    def qkv(self, feats: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor):
        """``feats`` is ``g`` (fused target feature or the layer's own earlier output) ``[..., T, H]``."""
        c = self.config
        h = torch.cat([self.embed_norm(embeds), self.hidden_norm(feats)], -1)
        shape = h.shape[:-1]
        q = self.q_proj(h).view(*shape, c.num_heads, c.head_dim)
        k = self.k_proj(h).view(*shape, c.num_kv_heads, c.head_dim)
        v = self.v_proj(h).view(*shape, c.num_kv_heads, c.head_dim)
        cos, sin = rope_tables(positions, c.head_dim, c.rope_theta, q.dtype)
        return feats, apply_rope(q, cos, sin), apply_rope(k, cos, sin), v
