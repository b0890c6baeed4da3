"""specdec's statistical law test on the tokens vLLM emits while it verifies specdec drafts at temperature > 0.

The exact law of the first three tokens is enumerated from the same checkpoint in transformers,
processed by specdec's own SamplingParams (temperature, top-k, top-p); vLLM's emitted tokens are
G-tested against it (specdec.conformance.g_test). Three arms, each a fresh engine:

* control, no speculation: must pass (checks the law and the test itself);
* the suffix drafter with specdec's CPU expand-kernel fix (the default): must pass;
* the suffix drafter with vLLM's own broken CPU kernel put back (vLLM issue 55005): must fail.

The last arm is the test's power: the conformance suite catches a real bug in vLLM's sampler.
It runs at temperature only: with top-k as well, vLLM's broken kernel leaves the int32 top-k
buffer uninitialised and the engine crashes in ``apply_top_k_top_p`` (``index ... is out of
bounds``) instead of emitting biased tokens; the fixed arms run both settings.
"""

import numpy as np
import pytest
import torch

from engines import engine, spec_config, tiny_llama, without_llvmlite
from sampling_law import FULL, TEMPERATURE, VOCAB, emitted, exact_law

TRIALS = 3000
ALPHA = 1e-4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("law") / "llama", vocab=VOCAB, scale=4.0, seed=7)


def law_p_values(seqs: np.ndarray, law: torch.Tensor) -> list[float]:
    from specdec.conformance import g_test

    out = []
    for k in (2, 3):
        idx = np.zeros(len(seqs), dtype=np.int64)
        for j in range(k):
            idx = idx * VOCAB + seqs[:, j]
        observed = torch.bincount(torch.from_numpy(idx), minlength=VOCAB**k)
        probs = law.sum(dim=2).reshape(-1) if k == 2 else law.reshape(-1)
        out.append(g_test(observed, probs)[2])
    return out


def _break_cpu_expand():
    """Put back vLLM's own registration of its CPU expand kernel (what an engine without specdec's fix runs)."""
    from vllm.triton_utils.dispatcher import register_kernels
    from vllm.utils import cpu_triton_utils

    from specdec.integrations.vllm import cpu_sampling

    with without_llvmlite():  # see engines.engine
        register_kernels({cpu_sampling.KERNEL: cpu_triton_utils._expand_kernel_impl})


def test_sampled_law_control_and_with_fix_pass_without_fix_fails(model):
    from specdec.integrations.vllm import cpu_sampling

    full, temp = exact_law(model, FULL), exact_law(model, TEMPERATURE)
    with engine(model, speculative=None, max_num_seqs=64, max_model_len=64) as llm:
        control = law_p_values(emitted(llm, FULL, TRIALS), full)
    with engine(model, speculative=spec_config(3), max_num_seqs=64, max_model_len=64) as llm:
        assert cpu_sampling.affected() is None, "the fix was not installed on an affected vLLM"
        fixed_full = law_p_values(emitted(llm, FULL, TRIALS), full)
        fixed_temp = law_p_values(emitted(llm, TEMPERATURE, TRIALS), temp)
        accepted = sum(m.value for m in llm.get_metrics() if m.name == "vllm:spec_decode_num_accepted_tokens")
        _break_cpu_expand()
        assert cpu_sampling.affected() is not None, "this vLLM does not carry issue 55005: the pair cannot run"
        broken = law_p_values(emitted(llm, TEMPERATURE, TRIALS), temp)
    print(f"law test p-values (first 2, first 3 tokens): control {control}, fixed {fixed_full} / {fixed_temp}, "
          f"vLLM's CPU kernel {broken}; accepted drafts {accepted:.0f}")
    assert min(control) > ALPHA, f"control (no speculation) failed the law test: p = {control}"
    assert accepted > 0.05 * TRIALS, "too few drafts were accepted to test the rejection path"
    fixed = fixed_full + fixed_temp
    assert min(fixed) > ALPHA, f"with specdec's fix the law test failed: p = {fixed}"
    assert min(broken) < 1e-12, f"the law test did not detect vLLM issue 55005: p = {broken}"


def test_declining_the_fix_refuses_to_start(model):
    _break_cpu_expand()  # the state of a process in which specdec's fix was never installed
    with pytest.raises(Exception, match="55005"):
        with engine(model, speculative=spec_config(3), options={"fix_cpu_expand": False}, max_model_len=64):
            pass
