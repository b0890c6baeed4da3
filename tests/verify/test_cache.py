"""The ragged cache's layers append in place: the same rows as transformers' torch.cat layer after any
sequence of appends, cuts, row moves and batch selections, without copying the held rows each step."""

import torch
from transformers.cache_utils import DynamicLayer

from specdec.verify import cache as kv


def _both():
    grow = kv.new_cache()
    cat = kv.new_cache()
    cat.layer_class_to_replicate = DynamicLayer
    return grow, cat


def _same(a, b):
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)


def test_appends_cuts_moves_and_selections_match_torch_cat():
    gen = torch.Generator().manual_seed(0)
    grow, cat = _both()
    B, H, D = 3, 2, 4
    for step in range(60):
        op = step % 6
        S = grow.rows
        if op == 3 and S > 2:  # a cut (compaction, a failed forward)
            n = int(torch.randint(1, S, (1,), generator=gen))
            kv.truncate(grow, n)
            kv.truncate(cat, n)
        elif op == 4 and S > 3:  # rows moved, sources read before destinations are written
            b = torch.tensor([0, B - 1]), torch.tensor([S - 1, 1]), torch.tensor([1, S - 2])
            kv.move_rows(grow, *b)
            kv.move_rows(cat, *b)
        elif op == 5 and B > 1 and step % 12 == 5:  # a request leaves the batch
            index = torch.arange(1, B)
            kv.select(grow, index)
            kv.select(cat, index)
            B -= 1
        elif op == 5 and B > 1:  # the batch reordered: new tensors of the same shape
            index = torch.arange(B - 1, -1, -1)
            kv.select(grow, index)
            kv.select(cat, index)
        T = int(torch.randint(1, 70, (1,), generator=gen))  # sometimes past the spare rows
        for layer in range(2):
            k, v = torch.randn(B, H, T, D, generator=gen), torch.randn(B, H, T, D, generator=gen)
            out = grow.update(k, v, layer)
            ref = cat.update(k.clone(), v.clone(), layer)
            assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
        _same(grow, cat)
    assert grow.rows == cat.rows > 0


def test_a_step_within_the_spare_rows_writes_in_place():
    grow, _ = _both()
    grow.update(torch.randn(1, 2, 100, 4), torch.randn(1, 2, 100, 4), 0)
    layer = grow.layers[0]
    base = layer.keys.data_ptr()
    for _ in range(kv.MIN_SPARE):  # 100 rows get max(64, 125 // 4) = 64 spare ones
        k = torch.randn(1, 2, 1, 4)
        keys, _ = grow.update(k, k, 0)
        assert keys.data_ptr() == base and torch.equal(keys[:, :, -1:], k)
    grow.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4), 0)  # the 65th: regrown once
    assert layer.keys.data_ptr() != base and layer.keys.shape[-2] == 100 + kv.MIN_SPARE + 1
    kv.truncate(grow, 10)
    cut = layer.keys.data_ptr()
    grow.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), 0)
    assert layer.keys.data_ptr() == cut and layer.keys.shape[-2] == 13  # a cut keeps the buffer


def test_a_batch_selection_frees_the_old_buffers_at_once():
    """After ``select`` the whole batch's buffers (with their spare rows) must not wait for the next
    update to be freed: until then they would sit beside the selected rows and the regrown buffer."""
    import gc
    import weakref

    grow, cat = _both()
    k, v = torch.randn(4, 2, 100, 4), torch.randn(4, 2, 100, 4)
    grow.update(k, v, 0)
    cat.update(k.clone(), v.clone(), 0)
    old = weakref.ref(grow.layers[0].keys._base)
    kv.select(grow, torch.tensor([2]))
    kv.select(cat, torch.tensor([2]))
    gc.collect()
    assert old() is None
    _same(grow, cat)
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    assert torch.equal(grow.update(k, v, 0)[0], cat.update(k.clone(), v.clone(), 0)[0])
