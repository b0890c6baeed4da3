"""The shared right-padded KV cache of a ragged batch: per-request writes, row moves, cuts.

Every layer holds ``[B, Hkv, S, D]`` tensors. Request ``b`` owns rows ``[0, lengths[b])`` (row =
position); rows after them are holes the mask hides. A verify step of ``T`` new tokens writes
request ``b``'s rows at ``[lengths[b], lengths[b] + T)`` -- right after its own prefix, not after the
longest request's -- so every request's new rows directly follow its prefix. That is the layout
the tree-attention op reads (``prefix_lens`` = lengths), holes or not, and it makes the dense mask
and the compaction the same for every request.

transformers' ``DynamicCache(config=...)`` gives sliding-window layers a ``DynamicSlidingWindowLayer``
that keeps only the last ``W - 1`` rows of the *tensor*; in a right-padded batch those are not each
request's last rows, and compaction moves rows by index. ``RaggedCache`` (:func:`new_cache`) keeps every
row in every layer (plain ``DynamicLayer``); sliding windows are applied by the mask. The price is
memory: a sliding layer holds the whole context instead of ``W - 1`` rows.
"""

from __future__ import annotations

import functools

import torch


def new_cache():
    """An empty :class:`RaggedCache` (``DynamicCache`` subclass; transformers is imported on first use,
    so importing specdec's engine stays light)."""
    return _ragged_cache_class()()


@functools.cache
def _ragged_cache_class():
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class RaggedCache(DynamicCache):
        """A ``DynamicCache`` (every layer a ``DynamicLayer``) whose next forward can write each request's
        new rows at its own start row (:meth:`write_at`)."""

        def __init__(self):
            super().__init__()  # no config: every layer, sliding ones included, keeps all its rows
            self.layer_class_to_replicate = DynamicLayer
            self._moves: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

        @property
        def rows(self) -> int:
            """Rows per request in every layer (``S``)."""
            return self.get_seq_length()

        def write_at(self, starts: list[int] | None, new_rows: int, device) -> None:
            """Make the next forward's ``new_rows`` rows of request ``b`` land at ``starts[b]`` (None, or
            every start equal to ``S``: appended, transformers' own behaviour). Cleared by :meth:`done`."""
            S = self.rows
            late = [b for b, s in enumerate(starts or []) if s != S]
            if not late:
                self._moves = None
                return
            if any(not 0 <= starts[b] <= S for b in late):
                raise ValueError(f"write_at: starts {starts} outside [0, {S}]")
            t = torch.arange(new_rows).repeat(len(late))
            b_idx = torch.tensor(late).repeat_interleave(new_rows)
            dst = torch.tensor([starts[b] for b in late]).repeat_interleave(new_rows) + t
            self._moves = (b_idx.to(device), dst.to(device), t.to(device))

        def done(self) -> None:
            self._moves = None

        def update(self, key_states, value_states, layer_idx, *args, **kwargs):
            """Append (transformers' update), then copy the requests' new rows to their start rows.
            ``key_states`` / ``value_states``: ``[B, Hkv, T, D]``; returns the layer's full tensors."""
            keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
            if self._moves is not None:
                b_idx, dst, t = self._moves
                keys[b_idx, :, dst] = key_states[b_idx, :, t]
                values[b_idx, :, dst] = value_states[b_idx, :, t]
            return keys, values

    return RaggedCache


def move_rows(cache, b_idx: torch.Tensor, dst: torch.Tensor, src: torch.Tensor) -> None:
    """``row dst[i] <- row src[i]`` of request ``b_idx[i]``, in every layer (one indexed copy per tensor;
    the sources are read before any destination is written)."""
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name)
            t[b_idx, :, dst] = t[b_idx, :, src]


def truncate(cache, length: int) -> None:
    """Keep the first ``length`` rows of every layer (sliced directly: ``DynamicCache.crop``'s
    argument changed meaning across transformers 5.x releases)."""
    for layer in cache.layers:
        if layer.is_initialized and layer.keys.shape[-2] > length:
            layer.keys = layer.keys[:, :, :length]
            layer.values = layer.values[:, :, :length]


def select(cache, index: torch.Tensor) -> None:
    """Keep the requests at ``index`` (``LongTensor[B']``) in every layer."""
    for layer in cache.layers:
        if layer.is_initialized:
            layer.keys = layer.keys.index_select(0, index)
            layer.values = layer.values.index_select(0, index)
