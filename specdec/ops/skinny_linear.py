"""Skinny linear: ``y = x @ weight^T + bias`` for the few rows of a verify step, on CPU.

Shapes: ``x [M, K]``, ``weight [N, K]``, ``bias [N]`` or None, on the CPU; ``x`` and ``bias``
float32, ``weight`` float32 or float16; returns float32 ``y [M, N]``. :func:`skinny_linear_reference`
(``torch.nn.functional.linear`` on the weight widened to float32) defines the meaning.

On a CPU weights stream from DRAM, so a verify step's few rows should cost what one row costs; the
kernel (``csrc/kernels/cpu/skinny_linear.cpp``) reads each weight row once for all rows. Results equal
the reference up to a fixed summation order (independent of thread count). A float16 weight is widened
as loaded and takes the same FMAs, so an :func:`exact_half` copy gives bitwise the float32 result.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import _ext


#: Row counts for which the compiled kernel is used by the target adapter: those where it beat the
#: BLAS path at every count measured, per vector ISA (the kernel's register tile differs; figures in
#: docs/performance.md, "CPU skinny linear"); prefill's hundreds of rows stay with BLAS.
FAST_ROWS = range(1, 65) if torch.backends.cpu.get_cpu_capability().startswith("AVX512") else range(1, 25)


def skinny_linear_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The definition: ``torch.nn.functional.linear`` (a float16 weight widened to float32 first)."""
    return torch.nn.functional.linear(x, weight.float() if weight.dtype == torch.float16 else weight, bias)


def exact_half(weight: torch.Tensor) -> torch.Tensor | None:
    """A float16 copy of a float32 CPU ``weight`` when float16 holds every value exactly, else None."""
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        return None
    with torch.no_grad():
        half = weight.detach().to(torch.float16)
        return half if torch.equal(half.float(), weight) else None


#: How the kernel widens a float16 weight: the best path this CPU has, or one named (tests run each).
HALF_PATHS = ("auto", "avx512", "avx2", "portable")


def check_inputs(x, weight, bias=None, half_path: str = "auto") -> None:
    """Raise TypeError/ValueError naming the argument that breaks the contract."""
    if half_path not in HALF_PATHS:
        raise ValueError(f"skinny_linear: half_path must be one of {HALF_PATHS}, got {half_path!r}")
    for name, t in (("x", x), ("weight", weight)) + ((("bias", bias),) if bias is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"skinny_linear: {name} must be a torch.Tensor, got {type(t).__name__}")
        if name == "weight" and t.dtype not in (torch.float32, torch.float16):
            raise TypeError(f"skinny_linear: weight must be float32 or float16, got {t.dtype}")
        if name != "weight" and t.dtype != torch.float32:
            raise TypeError(f"skinny_linear: {name} must be float32, got {t.dtype}")
        if t.device.type != "cpu":
            raise ValueError(f"skinny_linear: {name} must be on the CPU, got {t.device}")
    if x.dim() != 2 or weight.dim() != 2:
        raise ValueError(
            f"skinny_linear: expected x [M, K] and weight [N, K], got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"skinny_linear: x has K={x.shape[1]} but weight has K={weight.shape[1]}")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != weight.shape[0]):
        raise ValueError(f"skinny_linear: bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")


def op_available() -> bool:
    """True when the compiled extension (with its CPU kernel) is importable."""
    return _ext.available()


def skinny_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, impl: str = "auto",
    half_path: str = "auto",
) -> torch.Tensor:
    """``x @ weight^T + bias``; ``impl``: ``"auto"``, ``"op"`` (error when missing) or ``"reference"``;
    ``half_path``: float16 widening (:data:`HALF_PATHS`; one this CPU cannot run is refused)."""
    if impl not in ("auto", "op", "reference"):
        raise ValueError(f"skinny_linear: impl must be 'auto', 'op' or 'reference', got {impl!r}")
    check_inputs(x, weight, bias, half_path)
    if impl == "op" and not op_available():
        raise ValueError("skinny_linear: the compiled extension is not available")
    if impl == "reference" or not op_available():
        return skinny_linear_reference(x, weight, bias)
    return torch.ops.specdec.skinny_linear(x, weight, bias, half_path)


def eligible_linear(module: nn.Module) -> bool:
    """A plain float32 CPU ``nn.Linear`` (subclasses may override forward: left alone)."""
    return type(module) is nn.Linear and module.weight.dtype == torch.float32 and module.weight.device.type == "cpu"


def linear_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
                kernel_weight: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for ``x [..., K]``, through the kernel when the row count is in
    :data:`FAST_ROWS`, float32 on CPU and no grad is recorded; ``kernel_weight``: an :func:`exact_half`
    copy the kernel reads instead."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if (
        rows in FAST_ROWS
        and x.dtype == weight.dtype == torch.float32
        and x.device.type == "cpu"
        and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        and op_available()
    ):
        w = weight if kernel_weight is None else kernel_weight
        out = torch.ops.specdec.skinny_linear(x.reshape(rows, x.shape[-1]), w, bias)
        return out.view(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight, bias)


def lm_head_logits(lm_head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits ``[..., V]`` for hidden states ``[..., H]`` through ``lm_head`` (skinny kernel for a
    plain float32 CPU ``nn.Linear`` when the compiled extension is available, else the module)."""
    if eligible_linear(lm_head) and op_available():
        return linear_rows(hidden, lm_head.weight, lm_head.bias)
    return lm_head(hidden)
