"""SDPA attention that keeps grouped-query K/V grouped when a verify step passes a mask.

transformers' SDPA attention function copies every K/V head ``num_key_value_groups`` times
(``repeat_kv``: the whole cache of the layer, every layer, every step) whenever a query of more than
one row comes with an attention mask -- which is every verify step that holds a draft, since the
tree mask is a 4-D additive mask. torch's SDPA computes the same attention from the grouped K/V
with ``enable_gqa=True``, mask included, without the copy (SmolLM2: 9 query / 3 KV heads, so the
copy moved 3x each layer's cache; measured by ``benchmarks/bench_verify_attention.py``).

:class:`GroupedSDPA` switches a model to :func:`sdpa_forward` for the duration of a ``with`` block
(HFTarget's own forwards) and back on exit, so the caller's model is unchanged outside them. Every
case other than "mask given, several query rows, grouped heads" is delegated unchanged to
transformers' own SDPA function.
"""

from __future__ import annotations

import torch.nn.functional as F

NAME = "specdec_sdpa"


def _hf_sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def sdpa_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """Attention function for transformers' ``AttentionInterface``.

    Shapes: ``query [B, Hq, T, D]``, ``key``/``value`` ``[B, Hkv, S, D]``, ``attention_mask``
    broadcastable to ``[B, Hq, T, S]`` (additive or boolean) or None. Returns
    ``([B, T, Hq, D], None)`` as transformers' SDPA function does.
    """
    groups = getattr(module, "num_key_value_groups", 1)
    special = any(kwargs.get(k) is not None for k in ("softcap", "position_bias")) or kwargs.get("output_attentions")
    if attention_mask is None or groups == 1 or query.shape[2] == 1 or special:
        return _hf_sdpa()(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                          is_causal=is_causal, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Registers :func:`sdpa_forward` and transformers' SDPA mask builder under :data:`NAME`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


class GroupedSDPA:
    """Inside ``with``: a model configured for ``"sdpa"`` runs :func:`sdpa_forward` instead.

    Models configured otherwise (eager, the tree-attention op, flash kernels) are left alone. Not
    re-entrant; the configuration is restored on exit, exceptions included.
    """

    def __init__(self, model):
        self.config = getattr(model, "config", None)
        self.active = getattr(self.config, "_attn_implementation", None) == "sdpa"
        if self.active:
            register()
        self._inside = False

    def __enter__(self) -> "GroupedSDPA":
        if self._inside:
            raise RuntimeError("GroupedSDPA is not re-entrant")
        self._inside = True
        if self.active:
            self.config._attn_implementation = NAME
        return self

    def __exit__(self, *exc) -> None:
        if self.active:
            self.config._attn_implementation = "sdpa"
        self._inside = False
