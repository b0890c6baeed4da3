"""Tree-attention op (CPU C++ kernel, CUDA kernel) against the float64 reference, plus semantics
(chain == causal, one node == decode), validation errors and torch.library.opcheck.

Tolerance (flash-attention's rule): the kernel's max error against float64 may be at most twice the
plain-torch reference's error computed in the same low precision, plus a tiny absolute floor.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

from tree_attention_cases import make_case

# the module, not the function of the same name that specdec.ops re-exports
ta = importlib.import_module("specdec.ops.tree_attention")

_ext_ok = ta.op_available(torch.device("cpu"))
needs_ext = pytest.mark.skipif(not _ext_ok, reason="specdec._C is not built")
DEVICES = [pytest.param("cpu", marks=needs_ext), pytest.param("cuda", marks=pytest.mark.cuda)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
FLOOR = {torch.float32: 1e-5, torch.bfloat16: 1e-4, torch.float16: 1e-4}

# (batch, nodes, q_heads, kv_heads, head_dim, prefixes, node_counts): trees of 1, 7, 64, 255 nodes,
# prefixes 0, 1, 1000, 5000, GQA ratios 1, 4, 8, padded batches. Few heads for the big shapes.
CASES = {
    "n1_p0_gqa1": (1, 1, 4, 4, 64, [0], None),
    "n7_p1_p1000_gqa4": (2, 7, 8, 2, 64, [1, 1000], None),
    "n64_p0_p5000_gqa8": (2, 64, 8, 1, 128, [0, 5000], None),
    "n255_p1000_gqa4": (1, 255, 4, 1, 64, [1000], None),
    "padded_gqa4": (3, 33, 4, 2, 128, [5, 0, 77], [33, 10, 1]),
}


def _check_against_float64(out, q, k, v, mask, prefix, scale=None):
    ref64 = ta.tree_attention_reference(
        q.double(), k.double(), v.double(), mask, prefix, scale=scale, compute_dtype=torch.float64
    )
    low = ta.tree_attention_reference(q, k, v, mask, prefix, scale=scale, compute_dtype=q.dtype)
    assert out.shape == ref64.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all()
    err = (out.double() - ref64).abs().max().item()
    ref_err = (low.double() - ref64).abs().max().item()
    assert err <= 2 * ref_err + FLOOR[q.dtype], f"max error {err:.3g} vs reference's {ref_err:.3g}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_matches_float64_reference(device, dtype, case):
    b, n, hq, hkv, d, prefixes, counts = CASES[case]
    inputs = make_case(b, n, hq, hkv, d, prefixes, dtype, device, seed=list(CASES).index(case), node_counts=counts)
    out = ta.tree_attention(*inputs, impl="op")
    _check_against_float64(out.cpu(), *(t.cpu() for t in inputs))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("prefixes", [[3, 0], [70, 100]])  # the second spans full prefix tiles
def test_padded_nodes_are_zero(device, prefixes):
    q, k, v, mask, prefix = make_case(2, 9, 4, 2, 64, prefixes, torch.float32, device, node_counts=[4, 9])
    q[0, 4:] = float("nan")  # a padding node's query is garbage: it must not reach the output
    out = ta.tree_attention(q, k, v, mask, prefix, impl="op")
    assert torch.equal(out[0, 4:].cpu(), torch.zeros_like(out[0, 4:].cpu()))
    assert out[0, :4].abs().sum() > 0 and bool(torch.isfinite(out).all())


@pytest.mark.parametrize("impl", ["reference", pytest.param("op", marks=needs_ext)])
@pytest.mark.parametrize("prefix_len", [0, 13])
def test_chain_equals_causal_attention(impl, prefix_len):
    n, hq, hkv, d = 6, 4, 2, 64
    q, k, v, mask, prefix = make_case(1, n, hq, hkv, d, [prefix_len], torch.float32, extra_rows=0, chain=True)
    out = ta.tree_attention(q, k, v, mask, prefix, impl=impl)
    total = prefix_len + n
    q_full = torch.randn(1, total, hq, d)
    q_full[:, prefix_len:] = q
    kk = k.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    vv = v.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    causal = F.scaled_dot_product_attention(q_full.transpose(1, 2), kk, vv, is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, causal[:, prefix_len:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("impl", ["reference", pytest.param("op", marks=needs_ext)])
def test_single_node_equals_decode_step(impl):
    hq, hkv, d, p = 8, 2, 128, 40
    q, k, v, mask, prefix = make_case(2, 1, hq, hkv, d, [p, p], torch.float32, extra_rows=0)
    out = ta.tree_attention(q, k, v, mask, prefix, scale=0.3, impl=impl)
    kk = k.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    vv = v.repeat_interleave(hq // hkv, dim=2).transpose(1, 2)
    decode = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, scale=0.3).transpose(1, 2)
    torch.testing.assert_close(out, decode, rtol=1e-5, atol=1e-5)


@needs_ext
def test_strided_views_and_scale():
    """Hugging Face caches are [B, H, S, D]; their transposes must work without the caller copying."""
    q, k, v, mask, prefix = make_case(2, 5, 4, 2, 64, [7, 2], torch.bfloat16)
    qt, kt, vt = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not kt.is_contiguous()
    out = ta.tree_attention(qt, kt, vt, mask, prefix, scale=0.2, impl="op")
    _check_against_float64(out, q, k, v, mask, prefix, scale=0.2)


@needs_ext
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_cpu_op_widens_and_narrows_half_types_as_torch_does(dtype):
    """The CPU kernel converts fp16/bf16 itself (torch-free). With q = 0 both visible keys weigh 1/2,
    so every output is (v0 + v1) * 0.5 in float32, narrowed once: for v drawn from all bit patterns
    of the type (subnormals, infinities, NaNs; means that are round-half-even ties), it must equal
    torch's own conversions bit for bit (NaNs: NaN where torch's are)."""
    gen = torch.Generator().manual_seed(0)
    heads, dim = 16, 256
    v = torch.randint(-(1 << 15), 1 << 15, (1, 2, heads, dim), generator=gen, dtype=torch.int16).view(dtype)
    v[:, 1, : heads // 2] = v[:, 0, : heads // 2]  # half the heads: the mean is v itself, every pattern round-trips
    q = torch.zeros(1, 1, heads, dim, dtype=dtype)
    k = torch.zeros(1, 2, heads, dim, dtype=dtype)
    mask = torch.ones(1, 1, 1, dtype=torch.int64)  # one node, its own bit; key 0 is the prefix
    out = torch.ops.specdec.tree_attention(q, k, v, mask, torch.tensor([1], dtype=torch.int32))
    mean = (v[:, 0].float() + v[:, 1].float()) * 0.5
    want = mean.to(dtype)
    nan = want.isnan()
    assert torch.equal(out[:, 0].isnan(), nan)
    assert torch.equal(out[:, 0][~nan].view(torch.int16), want[~nan].view(torch.int16))
    # the data met subnormals and means that had to be rounded
    assert bool((want.abs() < torch.finfo(dtype).tiny).logical_and(want != 0).any())
    assert bool((want.float() != mean).logical_and(mean.isfinite()).any())


def _bad_inputs():
    q, k, v, mask, prefix = make_case(2, 5, 4, 2, 64, [3, 1], torch.float32, chain=True)
    good = dict(q=q, k=k, v=v, tree_mask=mask, prefix_lens=prefix)
    cases = {
        "heads": (dict(good, q=torch.randn(2, 5, 3, 64)), ValueError, "multiple of KV heads"),
        "dims": (dict(good, q=torch.randn(2, 5, 4, 32)), ValueError, "head dim"),
        "dtype": (dict(good, k=k.bfloat16()), TypeError, "share one dtype"),
        "prefix_dtype": (dict(good, prefix_lens=prefix.long()), TypeError, "int32"),
        "mask_shape": (dict(good, tree_mask=mask[:, :, :0]), ValueError, "ceil"),
        "device": (dict(good, prefix_lens=prefix.to("meta")), ValueError, "one device"),
    }
    bad = mask.clone()
    bad[0, 2, 0] &= ~(1 << 2)
    cases["no_self_bit"] = (dict(good, tree_mask=bad), ValueError, "own bit")
    bad = mask.clone()
    bad[1, 1, 0] |= 1 << 3
    cases["future_bit"] = (dict(good, tree_mask=bad), ValueError, "j > i")
    bad = mask.clone()
    bad[0, 4, 0] = (1 << 4) | (1 << 2) | (1 << 0)  # claims parent 2 but drops 2's own ancestors
    bad[0, 2, 0] = (1 << 2) | (1 << 1)
    cases["inconsistent"] = (dict(good, tree_mask=bad), ValueError, "parent's row")
    cases["prefix_range"] = (dict(good, prefix_lens=torch.tensor([3, 9], dtype=torch.int32)), ValueError, "must lie in")
    return cases


BAD = _bad_inputs()


@pytest.mark.parametrize("impl", ["reference", pytest.param("op", marks=needs_ext)])
@pytest.mark.parametrize("name", list(BAD))
def test_bad_inputs_raise_clear_errors(impl, name):
    kwargs, exc, words = BAD[name]
    with pytest.raises(exc, match=words):
        ta.tree_attention(**kwargs, impl=impl)


@needs_ext
@pytest.mark.parametrize("name", ["no_self_bit", "future_bit", "inconsistent", "prefix_range"])
def test_cpu_op_validates_in_cpp(name):
    kwargs, exc, words = BAD[name]
    with pytest.raises(exc, match=words):
        torch.ops.specdec.tree_attention(*kwargs.values())


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    args = make_case(2, 5, 4, 2, 64, [3, 1], torch.float32, device)
    torch.library.opcheck(torch.ops.specdec.tree_attention, args, {"scale": 0.25})


@needs_ext
def test_torch_compile_traces_op():
    args = make_case(1, 3, 2, 1, 64, [4], torch.float32)

    def step(q, k, v, m, p):
        return torch.ops.specdec.tree_attention(q, k, v, m, p) * 2.0

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(*args), step(*args))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_cuda_long_prefix_splits(dtype):
    """Long prefixes split across CTAs (flash-decoding reduction), batches with very different lengths."""
    inputs = make_case(3, 17, 8, 2, 128, [9000, 0, 2500], dtype, "cuda", seed=5, node_counts=[17, 3, 12])
    poison = torch.full_like(inputs[0], float("nan"))  # freed block the caching allocator hands out next
    del poison
    out = ta.tree_attention(*inputs, impl="op")
    _check_against_float64(out.cpu(), *(t.cpu() for t in inputs))


@pytest.mark.cuda
def test_cuda_fallback_head_dim():
    inputs = make_case(2, 9, 4, 2, 96, [30, 200], torch.bfloat16, "cuda", seed=6)
    out = ta.tree_attention(*inputs, impl="op")
    _check_against_float64(out.cpu(), *(t.cpu() for t in inputs))
