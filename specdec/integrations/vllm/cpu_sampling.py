"""vLLM issue 55005 on the CPU backend, and the version-guarded workaround through vLLM's kernel registry.

The bug (vLLM 0.32.0 CPU builds; vllm/utils/cpu_triton_utils.py::_expand_kernel_impl): the CPU
override of the rejection sampler's ``expand_kernel`` passes ``_ensure_int64(output)`` to the C++
kernel. ``output`` is a fresh float32 (temperature) or int32 (top-k) buffer, so the conversion makes
a copy, the kernel fills the copy, and the buffer vLLM goes on to use stays uninitialised: the
per-draft-token temperature, top-k and top-p of ``apply_sampling_constraints``
(vllm/v1/sample/rejection_sampler.py) are garbage, and every sampled request with a draft is
verified against the wrong distribution. Greedy requests never reach that code.

The workaround: vLLM's platform kernel registry (``vllm.triton_utils.dispatcher.register_kernels``,
documented there as the way "non-CUDA platforms can replace Triton kernels ... without modifying
core code"; the CPU platform registers the broken function through it at worker start) takes a
second registration of the same kernel name. :func:`install` registers :func:`expand_into`, which
fills ``output`` itself, and only when all of these hold: the platform is CPU, the installed
vLLM is a version listed in ``version.CPU_EXPAND_BUG``, and the kernel now registered is exactly
``cpu_triton_utils._expand_kernel_impl``. It is called when the drafter is built (never at import),
and like the platform's own registration it lasts for the rest of that process: it replaces a
kernel whose output was undefined with one that computes what the Triton kernel computes, for
every caller. Nothing of vLLM's scheduler, runner or sampler code is changed.
tests/vllm/test_vllm_sampling_law.py shows the bias without it and an exact law with it.
"""

from __future__ import annotations

import logging

import torch

from . import version

logger = logging.getLogger("specdec.vllm")

KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"
ISSUE = "vLLM issue 55005 (cpu_triton_utils._expand_kernel_impl writes into a copy)"


def expand_into(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """What vLLM's Triton ``expand_kernel`` does: ``output[start_b:end_b] = input[b]`` (with
    ``replace_from`` -> ``replace_to``), segment ``b`` ending at ``cu_num_tokens[b]``; written in place.

    Shapes: ``output [>= cu_num_tokens[-1]]``, ``input_val [B]``, ``cu_num_tokens [B]``.
    """
    del MAX_NUM_TOKENS  # a Triton block-size constant: no meaning here
    replace_from = getattr(replace_from, "value", replace_from)  # tl.constexpr when Triton is present
    replace_to = getattr(replace_to, "value", replace_to)
    if input_val.numel() == 0:
        return
    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    output[: int(cu[-1])] = torch.repeat_interleave(values, counts).to(output.dtype)


def affected() -> str | None:
    """Why this process has the bug (a sentence), or None when it does not."""
    found = version.installed()
    if found is None or not version.has_cpu_expand_bug(found[1]):
        return None
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return None
    from vllm.utils import cpu_triton_utils
    from vllm.v1.sample import rejection_sampler

    current = getattr(rejection_sampler.expand_kernel, "func", None)
    if current is not cpu_triton_utils._expand_kernel_impl:
        return None
    return f"vLLM {found[1]} on the CPU platform has {ISSUE}"


def install() -> bool:
    """Register :func:`expand_into` for ``expand_kernel`` where :func:`affected`; True when it did."""
    why = affected()
    if why is None:
        return False
    from vllm.triton_utils.dispatcher import register_kernels

    register_kernels({KERNEL: expand_into})
    logger.warning("specdec: %s; registered a correct expand kernel through vLLM's kernel registry "
                   "(sampled speculation is otherwise biased; docs/vllm.md)", why)
    return True


def refusal() -> str | None:
    """The error to raise when the fix is declined (``fix_cpu_expand=False``) on an affected process."""
    why = affected()
    if why is None:
        return None
    return (f"{why}: sampled speculation would be biased (a one-token draft was emitted 78-86% of the time "
            "where the model gives it 18-22%), and the drafter cannot see which requests sample; "
            "set fix_cpu_expand=true or use a vLLM without the bug")
