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

from ..ops.hf_attention import GROUPED_SDPA_NAME as NAME
from ..ops.hf_attention import register_grouped_sdpa as register
from ..ops.hf_attention import sdpa_forward  # noqa: F401  (the function a model runs inside the block)


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
