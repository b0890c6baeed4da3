"""specdec's attention function for transformers' attention registry: grouped SDPA and tree attention.

:func:`register` puts :func:`tree_attention_forward` under :data:`ATTENTION_NAME` in transformers'
``AttentionInterface``; :class:`specdec.verify.patch.ForwardPatch` switches a model to it only during
specdec's forwards, :func:`enable` for good. With :func:`tree_kwargs` each layer is one
``specdec.ops.tree_attention`` call (a sliding layer whose window binds uses its dense mask or raises;
every call is recorded so bypassing layers are caught); without, :func:`sdpa_forward`. Dropout,
soft-capping and sinks raise ValueError in tree mode.
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
MAX_POSITION_KWARG = "specdec_max_position"
TREE_CALLS_KWARG = "specdec_tree_calls"
WINDOWED_MASKS_KWARG = "specdec_windowed_masks"
_UNSUPPORTED = ("softcap", "s_aux", "sinks")


def tree_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """``AttentionInterface`` function: ``query [B, Hq, T, D]``, ``key``/``value`` ``[B, Hkv, S + T, D]``.
    With ``specdec_tree_mask`` (int64 ``[B, T, ceil(T/64)]``) and ``specdec_prefix_lens`` (int32 ``[B]``)
    runs the tree op (or SDPA over the layer's own mask), returning ``([B, T, Hq, D], None)``; else
    :func:`sdpa_forward`."""
    tree_mask = kwargs.pop(TREE_MASK_KWARG, None)
    prefix_lens = kwargs.pop(PREFIX_LENS_KWARG, None)
    max_position = kwargs.pop(MAX_POSITION_KWARG, None)
    calls = kwargs.pop(TREE_CALLS_KWARG, None)
    if tree_mask is None and prefix_lens is None:
        return sdpa_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    if tree_mask is None or prefix_lens is None:
        raise ValueError(f"tree attention needs both {TREE_MASK_KWARG} and {PREFIX_LENS_KWARG} kwargs")
    windowed_masks = kwargs.pop(WINDOWED_MASKS_KWARG, False)
    if calls is not None:
        calls.append(getattr(module, "layer_idx", None))
    window = kwargs.get("sliding_window")
    if window is not None and (max_position is None or max_position >= window):
        if not windowed_masks:
            raise ValueError(f"tree attention has no sliding window (sliding_window={window}, largest query "
                             f"position {max_position}): pass the sliding layers dense windowed masks")
        # The caller's windowed tree mask for this layer (the model passes its mapping's entry as given).
        return sdpa_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
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


def tree_kwargs(ancestor_mask, prefix_lens, *, add_root_node=False, total_rows=None, windowed_masks=False) -> dict:
    """Forward kwargs switching every layer to tree attention for one verify step (mask validated once).

    ``ancestor_mask``: int64 ``[B, N, ceil(N/64)]``; ``prefix_lens``: committed rows per request (new
    rows at ``[prefix_lens[b], prefix_lens[b] + nodes)``); ``add_root_node``: prepend the pending token
    as node 0; ``total_rows``: cache length after the step, checked; ``windowed_masks``: the forward's
    ``attention_mask`` gives each sliding layer its dense windowed mask.
    """
    mask = add_root(ancestor_mask) if add_root_node else ancestor_mask
    lens = torch.as_tensor(prefix_lens, dtype=torch.int32, device=mask.device)
    rows = int(total_rows) if total_rows is not None else int(lens.max()) + mask.shape[1] if lens.numel() else 0
    _ta.validate_tree_mask(mask, lens, rows)
    n = mask.shape[1]
    depth = unpack_mask(mask, n).sum(-1) - 1 if n else mask.new_zeros((mask.shape[0], 0))  # row = ancestors + self
    top = int((lens.long().unsqueeze(1) + depth).max()) if depth.numel() else -1
    return {TREE_MASK_KWARG: mask, PREFIX_LENS_KWARG: lens, MAX_POSITION_KWARG: top, TREE_CALLS_KWARG: [],
            WINDOWED_MASKS_KWARG: bool(windowed_masks)}


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
    """Transformers' SDPA attention on grouped K/V: ``query [B, Hq, T, D]``, ``key``/``value``
    ``[B, Hkv, S, D]``, mask broadcastable to ``[B, Hq, T, S]`` or None; returns ``([B, T, Hq, D], None)``."""
    groups = getattr(module, "num_key_value_groups", 1)
    special = any(kwargs.get(k) is not None for k in ("softcap", "position_bias")) or kwargs.get("output_attentions")
    if attention_mask is None or groups == 1 or query.shape[2] == 1 or special:
        return _hf_sdpa()(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                          is_causal=is_causal, **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None
