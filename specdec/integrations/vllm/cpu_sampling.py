"""vLLM issue 55005 on the CPU backend, and the version-guarded workaround through vLLM's kernel registry.

On vLLM 0.32.0 CPU builds the override of the rejection sampler's ``expand_kernel`` fills a copy of
its output, so sampled requests with drafts are verified with uninitialised temperature, top-k and
top-p (greedy ones are unaffected). :func:`install` registers :func:`expand_into` for that kernel
through ``vllm.triton_utils.dispatcher.register_kernels`` (the registry the CPU platform itself
uses) only when the platform is CPU, the version is in ``version.CPU_EXPAND_BUG`` and the
registered kernel is exactly the broken one. It is called when the drafter is built, never at
import, and lasts for the process. docs/vllm.md has the details and the law test that found it.
"""

from __future__ import annotations

import logging

import torch

from . import LOGGER_NAME, version

logger = logging.getLogger(LOGGER_NAME)

KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"
ISSUE = "vLLM issue 55005 (cpu_triton_utils._expand_kernel_impl writes into a copy)"


def expand_into(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """What vLLM's Triton ``expand_kernel`` does, in place: ``output[start_b:end_b] = input[b]`` (with
    ``replace_from`` -> ``replace_to``), segment ``b`` ending at ``cu_num_tokens[b]``. Shapes:
    ``output [>= cu_num_tokens[-1]]``, ``input_val [B]``, ``cu_num_tokens [B]``."""
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
