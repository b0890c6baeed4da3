"""The shared right-padded KV cache of a ragged batch: per-request writes, row moves, cuts.

Each layer holds ``[B, Hkv, S, D]``; request ``b`` owns rows ``[0, lengths[b])`` (row = position), later
rows are holes the mask hides. A step of ``T`` tokens writes request ``b``'s rows at
``[lengths[b], lengths[b] + T)``, right after its own prefix: the tree op's layout, and the same mask
and compaction for every request. Every layer keeps every row (transformers' sliding layers keep the
tensor's last ``W - 1`` rows, which are not each request's in a right-padded batch); windows are applied
by the mask, at the cost of memory. Rows live in buffers with spare rows (a quarter of the rows or
``MIN_SPARE``, whichever is more), so a step writes in place, O(new rows), instead of ``torch.cat``'s
copy of every row. ``update`` returns views of the buffers: nothing may keep them across steps.
"""

from __future__ import annotations

import functools

import torch

#: Fewest spare rows a layer's buffer is grown by (a quarter of its rows when that is more).
MIN_SPARE = 64


def new_cache():
    """An empty :class:`RaggedCache` (``DynamicCache`` subclass; transformers is imported on first use,
    so importing specdec's engine stays light)."""
    return _ragged_cache_class()()


@functools.cache
def _ragged_cache_class():
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class _GrowingLayer(DynamicLayer):
        """A ``DynamicLayer`` whose ``keys`` / ``values`` ``[B, Hkv, S, D]`` view the first ``S`` rows of
        spare-row buffers; tensors set from outside (a cut, a selection) are taken as they are."""

        def lazy_initialization(self, key_states, value_states) -> None:
            super().lazy_initialization(key_states, value_states)
            self._buffers = None  # (keys, values) [B, Hkv, capacity, D]

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            S, T = self.get_seq_length(), key_states.shape[-2]
            if not self._fits(S, T, key_states, value_states):
                self._regrow(S, S + T, key_states, value_states)
            kb, vb = self._buffers
            kb[:, :, S: S + T] = key_states
            vb[:, :, S: S + T] = value_states
            self.keys, self.values = kb[:, :, : S + T], vb[:, :, : S + T]
            return self.keys, self.values

        def _fits(self, S: int, T: int, key_states, value_states) -> bool:
            """The buffers hold ``keys`` / ``values``, match the new states and have room for ``T`` rows."""
            if self._buffers is None:
                return False
            for buf, cur, new in zip(self._buffers, (self.keys, self.values), (key_states, value_states)):
                if (S + T > buf.shape[-2] or buf.dtype != new.dtype or buf.device != new.device
                        or buf.shape[:2] != new.shape[:2] or buf.shape[-1] != new.shape[-1]):
                    return False
                if S and (cur.data_ptr() != buf.data_ptr() or cur.shape[:2] != buf.shape[:2]
                          or cur.stride() != buf.stride()):
                    return False
            return True

        def _regrow(self, S: int, need: int, key_states, value_states) -> None:
            capacity = need + max(MIN_SPARE, need // 4)
            bufs = []
            for cur, new in ((self.keys, key_states), (self.values, value_states)):
                buf = new.new_empty(*new.shape[:2], capacity, new.shape[-1])
                if S:
                    buf[:, :, :S] = cur
                bufs.append(buf)
            self._buffers = tuple(bufs)

        def reset(self) -> None:
            self._buffers = None
            super().reset()

    class RaggedCache(DynamicCache):
        """A ``DynamicCache`` (every layer a ``_GrowingLayer``: all rows kept, appended in place) whose next
        forward can write each request's new rows at its own start row (:meth:`write_at`)."""

        def __init__(self):
            super().__init__()  # no config: every layer, sliding ones included, keeps all its rows
            self.layer_class_to_replicate = _GrowingLayer
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
            if getattr(layer, "_buffers", None) is not None:
                layer._buffers = None  # the whole batch's buffers: freed now, not at the layer's next update
