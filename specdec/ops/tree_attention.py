"""Tree attention: each draft node attends to its request's committed KV prefix and to its ancestors
and itself, for a batch of trees in one call (docs/tree_attention.md).

* ``q``: ``[B, N, Hq, D]``, N nodes per request (padded).
* ``k``, ``v``: ``[B, S, Hkv, D]``: prefix rows ``[0, prefix_lens[b])``, node j at ``prefix_lens[b] + j``,
  later rows ignored; ``Hq`` a multiple of ``Hkv`` (query head h reads KV head ``h // (Hq // Hkv)``).
* ``tree_mask``: ``int64 [B, N, ceil(N/64)]`` (``DraftTree.ancestor_mask``); an all-zero row is padding.
* ``prefix_lens``: ``int32 [B]``, ``0 <= prefix_lens[b] <= S - N``; ``scale`` default ``D ** -0.5``.
* returns ``[B, N, Hq, D]`` in q's dtype, zeros for padded nodes.

:func:`tree_attention_reference` defines the meaning; :func:`tree_attention` dispatches to the
compiled ``torch.ops.specdec.tree_attention`` where it has a kernel for the device, else the reference.
"""

from __future__ import annotations

import torch

from .. import _ext
from ..tree import _WORD_BITS, unpack_mask
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_inputs(q, k, v, tree_mask, prefix_lens, scale=None, *, allow_float64=False) -> None:
    """ValueError/TypeError naming the first argument breaking the contract (no device sync);
    ``allow_float64``: the reference's test-oracle mode."""
    tensors = {"q": q, "k": k, "v": v, "tree_mask": tree_mask, "prefix_lens": prefix_lens}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tree_attention: {name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            "tree_attention: expected q [B, N, Hq, D] and k, v [B, S, Hkv, D] (4-D), got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.dtype not in _FLOAT_DTYPES + ((torch.float64,) if allow_float64 else ()):
        raise TypeError(f"tree_attention: q must be float32, float16 or bfloat16, got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"tree_attention: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if tree_mask.dtype != torch.int64:
        raise TypeError(f"tree_attention: tree_mask must be int64 packed bit words, got {tree_mask.dtype}")
    if prefix_lens.dtype != torch.int32:
        raise TypeError(f"tree_attention: prefix_lens must be int32, got {prefix_lens.dtype}")
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) != 1:
        raise ValueError(f"tree_attention: all tensors must be on one device, got {devices}")
    b, n, hq, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"tree_attention: k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
    bk, s, hkv, dk = k.shape
    if bk != b:
        raise ValueError(f"tree_attention: batch of q ({b}) and k/v ({bk}) differ")
    if dk != d:
        raise ValueError(f"tree_attention: head dim of q ({d}) and k/v ({dk}) differ")
    if d == 0 or hkv == 0 or hq % hkv != 0:
        raise ValueError(f"tree_attention: query heads ({hq}) must be a positive multiple of KV heads ({hkv})")
    words = (n + _WORD_BITS - 1) // _WORD_BITS
    if tuple(tree_mask.shape) != (b, n, words):
        raise ValueError(
            f"tree_attention: tree_mask must have shape [B, N, ceil(N/64)] = {(b, n, words)}, "
            f"got {tuple(tree_mask.shape)}"
        )
    if tuple(prefix_lens.shape) != (b,):
        raise ValueError(f"tree_attention: prefix_lens must have shape [B] = ({b},), got {tuple(prefix_lens.shape)}")
    if s < n:
        raise ValueError(f"tree_attention: k/v hold {s} rows, fewer than the {n} tree nodes")
    if scale is not None and not (isinstance(scale, (int, float)) and float(scale) > 0.0):
        raise ValueError(f"tree_attention: scale must be a positive float or None, got {scale!r}")


def unpack_bits(tree_mask: torch.Tensor) -> torch.Tensor:
    """``int64 [..., W]`` -> ``bool [..., 64 W]``: bit j of word j // 64 (all bits, padding included)."""
    return unpack_mask(tree_mask, tree_mask.shape[-1] * _WORD_BITS)


def validate_tree_mask(tree_mask: torch.Tensor, prefix_lens: torch.Tensor, seq_len: int) -> None:
    """ValueError naming the first offending row unless ``tree_mask`` int64 ``[B, N, W]`` is an ancestor
    relation: each row all zero (padding) or holding its own bit; no bit above i; each real row = its
    parent's row (highest set bit below i) plus its own bit. Also ``0 <= prefix_lens <= seq_len - N``.
    O(B N^2) bit work, one host sync."""
    b, n, _ = tree_mask.shape
    bits = unpack_bits(tree_mask)  # [B, N, 64W]
    cols = torch.arange(bits.shape[-1], device=bits.device)
    rows = torch.arange(n, device=bits.device)
    own = bits[:, rows, rows] if n else bits.new_zeros((b, 0))  # [B, N]
    nonempty = bits.any(-1)
    future = (bits & (cols[None, :] > rows[:, None])).any(-1)
    lower = bits & (cols[None, :] < rows[:, None])
    parent = torch.where(lower, cols, torch.full_like(cols, -1)).amax(-1) if n else rows.new_zeros((b, 0))
    parent_rows = torch.gather(bits, 1, parent.clamp(min=0).unsqueeze(-1).expand(-1, -1, bits.shape[-1]))
    expected = (parent_rows & (parent >= 0).unsqueeze(-1)) | (cols[None, :] == rows[:, None])
    inconsistent = own & (bits != expected).any(-1)
    checks = [
        (nonempty & ~own, "has ancestor bits but not its own bit (rows are all-zero padding or include node i itself)"),
        (future, "has a bit j > i (parents must precede children; bits past N must be zero)"),
        (inconsistent, "is not its parent's row plus its own bit (not a consistent ancestor relation)"),
    ]
    bad_prefix = (prefix_lens < 0) | (prefix_lens > seq_len - n)
    flags = torch.stack([c.any() for c, _ in checks] + [bad_prefix.any()]).tolist()
    for (cond, why), flag in zip(checks, flags):
        if flag:
            bi, ni = (int(x) for x in cond.nonzero()[0])
            raise ValueError(f"tree_attention: tree_mask[{bi}, {ni}] {why}")
    if flags[-1]:
        bi = int(bad_prefix.nonzero()[0, 0])
        raise ValueError(
            f"tree_attention: prefix_lens[{bi}] = {int(prefix_lens[bi])} must lie in [0, S - N] = [0, {seq_len - n}]"
        )


def dense_mask(tree_mask: torch.Tensor, prefix_lens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """``bool [B, N, S]``: node i of request b may attend key row s (prefix or ancestor-or-self)."""
    b, n, _ = tree_mask.shape
    bits = unpack_mask(tree_mask, n)  # [B, N, N]
    pos = torch.arange(seq_len, device=tree_mask.device)
    pl = prefix_lens.to(torch.int64)
    mask = (pos[None, None, :] < pl[:, None, None]).expand(b, n, seq_len).clone()
    cols = (pl[:, None] + torch.arange(n, device=tree_mask.device)).clamp(max=seq_len - 1)
    mask.scatter_(2, cols[:, None, :].expand(b, n, n), bits)
    return mask


def tree_attention_reference(q, k, v, tree_mask, prefix_lens, *, scale=None, compute_dtype=torch.float32):
    """Plain-torch tree attention defining the op: dense ``[B, N, S]`` mask, scores in ``compute_dtype``
    (float64 in and out: the test oracle); zeros for padded nodes."""
    check_inputs(q, k, v, tree_mask, prefix_lens, scale, allow_float64=True)
    b, n, hq, d = q.shape
    s, hkv = k.shape[1], k.shape[2]
    scale = d**-0.5 if scale is None else float(scale)
    mask = dense_mask(tree_mask, prefix_lens, s)  # [B, N, S]
    idx = torch.arange(n, device=q.device)
    real = unpack_mask(tree_mask, n)[:, idx, idx] if n else mask.new_zeros((b, 0))  # [B, N]
    mask = mask | ~real[..., None]  # padded rows: any finite softmax, zeroed below
    qf = q.to(compute_dtype).transpose(1, 2)  # [B, Hq, N, D]
    kf = k.to(compute_dtype).transpose(1, 2).repeat_interleave(hq // hkv, dim=1)  # [B, Hq, S, D]
    vf = v.to(compute_dtype).transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    scores = (qf @ kf.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    out = torch.softmax(scores, dim=-1) @ vf  # [B, Hq, N, D]
    out = out.transpose(1, 2) * real[..., None, None]
    return out.to(q.dtype)


def op_available(device: torch.device) -> bool:
    """True when ``torch.ops.specdec.tree_attention`` has a kernel for ``device``'s type."""
    if not _ext.available():
        return False
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        return bool(_ext.load().cuda_built())
    return False


def tree_attention(q, k, v, tree_mask, prefix_lens, *, scale=None, validate=True, impl="auto"):
    """Tree attention for a batch of trees. ``impl``: ``"auto"``, ``"op"`` (error when missing) or
    ``"reference"``. ``validate``: :func:`validate_tree_mask` (one host sync on GPU); the CPU op always
    validates in C++, the CUDA op checks only shapes and dtypes, so skip it only for trusted masks."""
    if impl not in ("auto", "op", "reference"):
        raise ValueError(f"tree_attention: impl must be 'auto', 'op' or 'reference', got {impl!r}")
    device = q.device if isinstance(q, torch.Tensor) else torch.device("cpu")
    use_op = impl == "op" or (impl == "auto" and op_available(device))
    if impl == "op" and not op_available(device):
        raise ValueError(f"tree_attention: the compiled op has no kernel for device {device}")
    if validate and not (use_op and device.type == "cpu"):
        # The compiled op repeats these checks in C++; done here only before validating, so the
        # per-layer hot path (validate=False, e.g. hf_attention) pays no Python-side checks.
        check_inputs(q, k, v, tree_mask, prefix_lens, scale)
        validate_tree_mask(tree_mask, prefix_lens, k.shape[1])
    if use_op:
        scale = None if scale is None else float(scale)
        return torch.ops.specdec.tree_attention(q, k, v, tree_mask, prefix_lens, scale)
    return tree_attention_reference(q, k, v, tree_mask, prefix_lens, scale=scale)
