"""The skinny-linear kernel against a float64 oracle, its contract errors, and the scoped patching
of a model's linear layers (specdec.ops.skinny_linear, specdec.verify.patch)."""

import importlib

import pytest
import torch
from torch import nn

from specdec import _ext
from specdec.ops.skinny_linear import (
    FAST_ROWS,
    exact_half,
    lm_head_logits,
    skinny_linear,
    skinny_linear_reference,
)
from specdec.verify.patch import ForwardPatch

needs_ext = pytest.mark.skipif(not _ext.available(), reason="compiled extension not built")


def _case(M, K, N, bias, seed=0):
    g = torch.Generator().manual_seed(seed * 1000 + M * 7 + K * 13 + N)
    x = torch.randn(M, K, generator=g)
    w = torch.randn(N, K, generator=g) / K ** 0.5
    b = torch.randn(N, generator=g) if bias else None
    return x, w, b


def _oracle(x, w, b):
    out = x.double() @ w.double().T
    return out + b.double() if b is not None else out


@needs_ext
@pytest.mark.parametrize("M", [1, 2, 3, 4, 5, 8, 9, 17, 64])
@pytest.mark.parametrize("K,N", [(1, 3), (15, 4), (16, 5), (17, 130), (576, 64), (100, 65)])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_float64_oracle(M, K, N, bias):
    x, w, b = _case(M, K, N, bias)
    out = skinny_linear(x, w, b, impl="op")
    assert out.shape == (M, N) and out.dtype == torch.float32
    oracle = _oracle(x, w, b)
    err = (out.double() - oracle).abs().max().item()
    ref_err = (skinny_linear_reference(x, w, b).double() - oracle).abs().max().item()
    # flash-attention's rule: at most twice the error of the plain-torch path in the same precision
    # (plus a few float32 ulps of the result scale, for cases where the reference is exact).
    assert err <= 2 * ref_err + 4 * torch.finfo(torch.float32).eps * oracle.abs().max().item() + 1e-30


@needs_ext
@pytest.mark.parametrize("M", [1, 3, 4, 8, 17])
@pytest.mark.parametrize("K,N", [(15, 4), (17, 130), (576, 64), (100, 65)])
def test_half_weight_is_bitwise_the_float32_weight_it_holds(M, K, N):
    """A float16 weight goes through the float32 path's FMAs: for a weight fp16 holds exactly the
    result is bitwise that of the float32 weight (tails past the 16-lane blocks included)."""
    x, w, b = _case(M, K, N, True)
    w = w.half().float()  # exactly representable
    half = exact_half(w)
    assert half is not None and half.dtype == torch.float16
    assert torch.equal(skinny_linear(x, half, b, impl="op"), skinny_linear(x, w, b, impl="op"))
    torch.testing.assert_close(skinny_linear_reference(x, half, b), skinny_linear_reference(x, w, b))


def _runs(path):
    try:
        skinny_linear(torch.ones(1, 16), torch.ones(1, 16).half(), impl="op", half_path=path)
        return True
    except RuntimeError as e:
        assert "does not run on this CPU" in str(e)
        return False


@needs_ext
@pytest.mark.parametrize("path", ["portable", "avx2", "avx512"])
def test_every_half_path_widens_exactly(path):
    """Each conversion path (the portable integer one runs on CPUs without F16C) widens every fp16
    value exactly: against identity inputs each output is one weight, so subnormals, zeros, the
    largest values and the 16-lane tails are compared bit for bit. Inf and nan weights land
    where the float32 path puts them. (Against the float32 path itself results are bitwise only on
    the same ISA: the portable path runs without FMA; ``auto`` is checked bitwise above.)"""
    if not _runs(path):
        pytest.skip(f"this CPU cannot run the {path} path")
    g = torch.Generator().manual_seed(7)
    for K, N in [(16, 4), (37, 9), (64, 20)]:
        w = (torch.randn(N, K, generator=g) / K ** 0.5).half()
        w.view(-1)[:6] = torch.tensor([2.0 ** -24, -(2.0 ** -20), 0.0, -0.0, 65504.0, 6.1e-5]).half()
        got = skinny_linear(torch.eye(K), w, impl="op", half_path=path)  # [K, N]: row m is w[:, m]
        assert torch.equal(got, w.float().T), (path, K, N)
    w = torch.randn(4, 40, generator=g).half()
    w[0, 3], w[1, 39], w[2, 17] = float("inf"), float("-inf"), float("nan")
    x = torch.rand(2, 40, generator=g) + 0.5
    torch.testing.assert_close(skinny_linear(x, w, impl="op", half_path=path),
                               skinny_linear(x, w.float(), impl="op"), equal_nan=True)


@needs_ext
@pytest.mark.parametrize("half", [False, True])
def test_each_output_is_summed_alike_whatever_its_tile(half):
    """The register tile (its shape differs per ISA and at the row edges) never changes an output's
    summation order: every output equals, bit for bit, the one computed alone (one input row, one
    weight row), with FMA tails and unaligned K included."""
    g = torch.Generator().manual_seed(11)
    for M, K, N in [(9, 576, 7), (5, 37, 6), (17, 48, 3)]:
        x = torch.randn(M, K, generator=g)
        w = torch.randn(N, K, generator=g) / K ** 0.5
        w = w.half() if half else w
        full = skinny_linear(x, w, impl="op")
        alone = torch.stack([torch.cat([skinny_linear(x[m:m + 1], w[n:n + 1], impl="op")[0] for n in range(N)])
                             for m in range(M)])
        assert torch.equal(full, alone), (M, K, N)


@needs_ext
def test_a_bad_half_path_is_named():
    with pytest.raises(ValueError, match="half_path must be one of"):
        skinny_linear(torch.ones(1, 4), torch.ones(2, 4).half(), half_path="sse")
    with pytest.raises(RuntimeError, match="half_path must be"):
        torch.ops.specdec.skinny_linear(torch.ones(1, 4), torch.ones(2, 4).half(), None, "sse")


def test_exact_half_refuses_what_fp16_would_round():
    w = torch.randn(8, 8).half().float()
    assert exact_half(w) is not None
    w[3, 5] += 1e-6  # no longer an fp16 value
    assert exact_half(w) is None
    assert exact_half(torch.ones(2, 2).double()) is None  # only float32 weights get a copy


@needs_ext
def test_strided_input_and_empty_shapes():
    x, w, b = _case(6, 40, 9, True)
    xt = x.T.contiguous().T  # same values, column-major strides
    torch.testing.assert_close(skinny_linear(xt, w, b, impl="op"), skinny_linear_reference(x, w, b))
    assert skinny_linear(torch.randn(0, 40), w, impl="op").shape == (0, 9)
    torch.testing.assert_close(skinny_linear(torch.randn(3, 0), torch.randn(5, 0), torch.ones(5), impl="op"),
                               torch.ones(3, 5))


@needs_ext
def test_result_does_not_depend_on_thread_count():
    x, w, b = _case(9, 576, 1536, True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = skinny_linear(x, w, b, impl="op")
        torch.set_num_threads(2)
        two = skinny_linear(x, w, b, impl="op")
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


@pytest.mark.parametrize("args,match", [
    ((torch.randn(2, 3).double(), torch.randn(4, 3)), "x must be float32"),
    ((torch.randn(2, 3), torch.randn(4, 3).bfloat16()), "weight must be float32 or float16"),
    ((torch.randn(2, 3).half(), torch.randn(4, 3).half()), "x must be float32"),
    ((torch.randn(2, 3), torch.randn(4, 3).half(), torch.randn(4).half()), "bias must be float32"),
    ((torch.randn(2, 3, 1), torch.randn(4, 3)), r"expected x \[M, K\]"),
    ((torch.randn(2, 3), torch.randn(4, 5)), "x has K=3 but weight has K=5"),
    ((torch.randn(2, 3), torch.randn(4, 3), torch.randn(5)), r"bias must be \[4\]"),
    (([[1.0]], torch.randn(4, 3)), "x must be a torch.Tensor"),
])
def test_bad_input_is_named(args, match):
    with pytest.raises((TypeError, ValueError), match=match):
        skinny_linear(*args)


@needs_ext
def test_compiled_op_checks_in_cpp_too():
    with pytest.raises(RuntimeError, match="x has K=3 but weight has K=5"):
        torch.ops.specdec.skinny_linear(torch.randn(2, 3), torch.randn(4, 5), None)


@needs_ext
def test_opcheck():
    x, w, b = _case(3, 32, 20, True)
    torch.library.opcheck(torch.ops.specdec.skinny_linear.default, (x, w, b),
                          test_utils=("test_schema", "test_faketensor"))


@needs_ext
def test_patched_layers_compute_the_same_and_are_restored():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 48), nn.SiLU(), nn.Linear(48, 16, bias=False))
    x = torch.randn(5, 32)
    expected = model(x)
    patch = ForwardPatch(model, linears=model, attention=False)
    assert len(patch.modules) == 2
    with torch.inference_mode(), patch:
        assert all("forward" in m.__dict__ for m in patch.modules)
        inside = model(x)
        long = model(torch.randn(max(FAST_ROWS) + 1, 32))  # beyond FAST_ROWS: F.linear path
    assert long.shape == (max(FAST_ROWS) + 1, 16)
    torch.testing.assert_close(inside, expected, rtol=1e-5, atol=1e-5)
    assert all("forward" not in m.__dict__ for m in patch.modules)  # the model is unchanged outside


@needs_ext
def test_linear_rows_uses_the_kernel_only_without_autograd(monkeypatch):
    linears = importlib.import_module("specdec.ops.skinny_linear")

    calls = []
    real = torch.ops.specdec.skinny_linear

    class Spy:
        def skinny_linear(self, *a):
            calls.append(1)
            return real(*a)

    monkeypatch.setattr(torch.ops, "specdec", Spy())
    layer = nn.Linear(8, 6)  # parameters require grad
    x = torch.randn(3, 8)
    with torch.no_grad():
        linears.linear_rows(x, layer.weight, layer.bias)
    assert calls == [1]
    out = linears.linear_rows(x, layer.weight, layer.bias)  # grad mode: F.linear, differentiable
    assert calls == [1] and out.requires_grad


@needs_ext
@pytest.mark.parametrize("enabled", [True, False])
def test_target_verify_routes_linears_through_the_kernel(monkeypatch, enabled):
    from specdec.models import tiny_model
    from specdec.verify import HFTarget
    from specdec.tree import DraftTree

    calls = []
    real = torch.ops.specdec.skinny_linear

    class Spy:
        def skinny_linear(self, *a):
            calls.append(a[1].shape)
            return real(*a)

    model = tiny_model("llama")
    target = HFTarget(model, skinny_linear=enabled)
    state, logits, _ = target.prefill([[1, 2, 3, 4]])
    target.set_pending(state, [int(logits.argmax())])
    monkeypatch.setattr(torch.ops, "specdec", Spy())
    target.verify(state, [DraftTree.from_paths([[5, 6], [7]])])
    n_linear = sum(1 for m in model.modules() if type(m) is nn.Linear)
    assert len(calls) == (n_linear if enabled else 0)  # every layer incl. the LM head, or none
    assert all("forward" not in m.__dict__ for m in model.modules())


@needs_ext
def test_half_weight_patch_is_bitwise_and_follows_weight_changes():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(32, 48), nn.SiLU(), nn.Linear(48, 16))
    with torch.no_grad():
        model[0].weight.copy_(model[0].weight.half().float())  # layer 0 as an fp16 artifact stores it
    x = torch.randn(5, 32)
    plain = ForwardPatch(model, linears=model, attention=False)
    half = ForwardPatch(model, linears=model, attention=False, half_weights=True)
    # made at construction, for layer 0 only: layer 1's weight is not fp16-exact
    assert half.extra_bytes == 48 * 32 * 2 and plain.extra_bytes == 0

    def both():
        with torch.inference_mode():
            with plain:
                expected = model(x)
            with half:
                return model(x), expected

    got, expected = both()
    assert torch.equal(got, expected)
    with torch.no_grad():
        model[0].weight.mul_(2)  # changed in place (still fp16-exact): the copy must follow
    got, expected = both()
    assert torch.equal(got, expected)


def test_patch_keeps_instance_level_wrappers():
    layer = nn.Linear(4, 4)
    wrapper = lambda x: torch.zeros(x.shape[0], 4)  # e.g. accelerate's hooked forward
    layer.forward = wrapper
    with ForwardPatch(layer, linears=layer, attention=False):
        assert layer.forward is wrapper
    assert layer.forward is wrapper


def test_patch_leaves_other_layers_alone():
    class Custom(nn.Linear):
        pass

    model = nn.Sequential(Custom(4, 4), nn.Linear(4, 4).double())
    assert ForwardPatch(model, linears=model, attention=False).modules == []


def test_patch_is_not_reentrant():
    patch = ForwardPatch(nn.Linear(4, 4), linears=None)
    with patch:
        with pytest.raises(RuntimeError, match="not re-entrant"):
            patch.__enter__()


@pytest.mark.parametrize("rows", [1, 2, 5, 9, 10, 40, 70])
def test_lm_head_matches_linear(rows):
    g = torch.Generator().manual_seed(rows)
    head = nn.Linear(48, 300, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(300, 48, generator=g))
    h = torch.randn(1, rows, 48, generator=g)
    out = lm_head_logits(head, h)
    assert out.shape == (1, rows, 300)
    torch.testing.assert_close(out, head(h), rtol=1e-5, atol=1e-4)


def test_lm_head_subclass_is_called_unchanged():
    class Scaled(nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    head = Scaled(8, 10)
    h = torch.randn(3, 8)
    assert torch.equal(lm_head_logits(head, h), head(h))
