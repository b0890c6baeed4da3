"""specdec's attention function for transformers' attention registry: grouped SDPA and tree attention.

:func:`tree_attention_forward` is registered under :data:`ATTENTION_NAME` (``"specdec_tree"``) in
``AttentionInterface``, with transformers' SDPA mask builder under the same name in
``AttentionMaskInterface`` (:func:`register`). A model whose ``config._attn_implementation`` names it
(transformers 5.x decoders call ``ALL_ATTENTION_FUNCTIONS.get_interface(...)``: Llama, Qwen2, ...)
runs it in every layer. :class:`specdec.verify.patch.ForwardPatch` switches the model to it for the
duration of specdec's own forwards only; :func:`enable` switches a model for good, for users who call
the function from their own loop.

Without tree kwargs (prefill, plain decoding, verify steps that pass their own 4-D mask) it is
:func:`sdpa_forward`: transformers' SDPA attention, except that a mask with several query rows over
grouped-query heads no longer copies every K/V head ``num_key_value_groups`` times (``repeat_kv``:
the whole cache of the layer, every layer, every verify step that holds a draft). torch's SDPA
computes the same attention from the grouped K/V with ``enable_gqa=True``, mask included (SmolLM2:
9 query / 3 KV heads, so the copy moved 3x each layer's cache; ``benchmarks/bench_verify_attention.py``).

With tree kwargs (:func:`tree_kwargs`), for a verify step whose new K/V rows directly follow each
request's committed prefix (the cache holds ``[B, Hkv, S, D]`` with no holes, every request at length
``S``), every layer's attention becomes one ``specdec.ops.tree_attention`` call: new token i attends to
rows ``[0, prefix_lens[b])`` and to the new rows of its ancestors and itself. The mask is validated
once in :func:`tree_kwargs`, not per layer; ``add_root_node=True`` prepends a root node (a pending
token fed before the tree, the parent of every root of the tree), for adapters that feed ``1 + N``
tokens per step. Ragged batches whose new rows do not directly follow every prefix (holes in a
right-padded cache) cannot be expressed as (prefix, tree) rows: the adapter passes its dense 4-D mask
instead and omits the tree kwargs (SDPA with that mask).

In tree mode the model still builds its causal mask (the SDPA builder); it is not used, because the
tree kwargs define visibility. Dropout (training), soft-capping, sliding windows and sinks are not
supported in tree mode and raise ValueError rather than being dropped. Where the compiled op is
missing, ``specdec.ops.tree_attention`` runs its plain-torch reference.
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from ..tree import pack_mask, unpack_mask

# By module path: the package re-exports the function ``tree_attention`` under the module's name.
_ta = importlib.import_module("specdec.ops.tree_attention")

ATTENTION_NAME = "specdec_tree"
TREE_MASK_KWARG = "specdec_tree_mask"
PREFIX_LENS_KWARG = "specdec_prefix_lens"
_UNSUPPORTED = ("softcap", "sliding_window", "s_aux", "sinks")


def tree_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Attention function for transformers' ``AttentionInterface``.

    Shapes: ``query [B, Hq, T, D]``, ``key``/``value`` ``[B, Hkv, S + T, D]`` (cache after update).
    With ``specdec_tree_mask`` (``int64 [B, T, ceil(T/64)]``) and ``specdec_prefix_lens``
    (``int32 [B]``) in kwargs, runs the tree-attention op and returns ``([B, T, Hq, D], None)``;
    without them, delegates to :func:`specdec.ops.hf_attention.sdpa_forward` (transformers' SDPA
    attention, minus its K/V head copy when a mask comes with several query rows).
    """
    tree_mask = kwargs.pop(TREE_MASK_KWARG, None)
    prefix_lens = kwargs.pop(PREFIX_LENS_KWARG, None)
    if tree_mask is None and prefix_lens is None:
        return sdpa_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    if tree_mask is None or prefix_lens is None:
        raise ValueError(f"tree attention needs both {TREE_MASK_KWARG} and {PREFIX_LENS_KWARG} kwargs")
    if dropout and module.training:
        raise ValueError(f"tree attention does not support attention dropout in training (dropout={dropout})")
    for name in _UNSUPPORTED:
        if kwargs.get(name) is not None:
            raise ValueError(f"tree attention does not support {name}={kwargs[name]!r}")
    q = query.transpose(1, 2)  # [B, T, Hq, D] view
    k = key.transpose(1, 2)  # [B, S + T, Hkv, D] view: the op reads strides, no copy
    v = value.transpose(1, 2)
    out = _ta.tree_attention(
        q, k, v, tree_mask.to(q.device), prefix_lens.to(q.device), scale=scaling, validate=False
    )
    return out, None


def add_root(tree_mask: torch.Tensor) -> torch.Tensor:
    """``int64 [B, N, W]`` -> ``int64 [B, 1 + N, W']``: node 0 becomes a root that is the parent of
    every root of the tree (every real node gains ancestor 0; padded rows stay all zero)."""
    b, n, _ = tree_mask.shape
    bits = unpack_mask(tree_mask, n)  # [B, N, N]
    idx = torch.arange(n, device=tree_mask.device)
    real = bits[:, idx, idx] if n else bits.new_zeros((b, 0))
    dense = torch.zeros(b, 1 + n, 1 + n, dtype=torch.bool, device=tree_mask.device)
    dense[:, 0, 0] = True
    dense[:, 1:, 0] = real
    dense[:, 1:, 1:] = bits
    return pack_mask(dense)


def tree_kwargs(ancestor_mask, prefix_lens, *, add_root_node=False, total_rows=None) -> dict:
    """Model-forward kwargs that switch every layer to tree attention for one verify step.

    ``ancestor_mask``: ``int64 [B, N, ceil(N/64)]`` (e.g. ``TreeBatch.ancestor_mask``);
    ``prefix_lens``: committed K/V rows per request (sequence or ``int32 [B]``), which must equal the
    cache length before this step for every request (no holes). ``add_root_node``: prepend the
    pending token as node 0. ``total_rows``: if given, the cache length after the step, to check
    ``prefix_lens + nodes <= total_rows``. The mask is validated here, once per step.
    """
    mask = add_root(ancestor_mask) if add_root_node else ancestor_mask
    lens = torch.as_tensor(prefix_lens, dtype=torch.int32, device=mask.device)
    rows = int(total_rows) if total_rows is not None else int(lens.max()) + mask.shape[1] if lens.numel() else 0
    _ta.validate_tree_mask(mask, lens, rows)
    return {TREE_MASK_KWARG: mask, PREFIX_LENS_KWARG: lens}


def register() -> str:
    """Registers :func:`tree_attention_forward` and its (SDPA) mask builder; returns ``ATTENTION_NAME``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, tree_attention_forward)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    return ATTENTION_NAME


def enable(model) -> None:
    """Registers the function and switches ``model`` (a ``PreTrainedModel``) to it for good (for a
    caller's own loop; specdec's decoder switches only during its forwards, :mod:`specdec.verify.patch`)."""
    register()
    model.set_attn_implementation(ATTENTION_NAME)




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
