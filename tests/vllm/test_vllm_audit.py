"""specdec's audit on vLLM's CPU build: vLLM issue 55005 flagged, specdec's fix exact.

Four speculative engines over the audit's tiny target, each an audit of three settings
(temperature; a repetition penalty, which the rejection sampler must apply on every drafted
position; top-k alone) against one shared plain arm (vLLM without speculation, run once):

* specdec's ``custom_class`` drafter (it installs specdec's CPU expand fix itself): exact at
  temperature and with the penalty;
* the same drafter with vLLM's own broken CPU kernel put back (the mutant "vLLM with 55005"):
  biased at temperature;
* vLLM's own ``ngram`` method as shipped: the same bug, the same verdict;
* ``ngram`` with specdec's fix registered by the audit's worker: exact.

Top-k without top-p breaks every one of them (``error``, never exact): with speculation on, vLLM
0.32 runs the rejection sampler on every step, also on steps with no draft token at all (the
prefill), and on CPU its top-k-only path calls ``k.max()`` on the empty batch
(docs/audit.md, "top-k alone").

Each engine runs in its own worker process (vLLM 0.32's CPU build cannot start a second engine with
another speculative config in one process). ``test_cpu_sampler_kernel_draws_the_softmax_law`` checks
vLLM's CPU sampling kernel itself, without an engine.
"""

import sys

import pytest

from specdec.conformance.audit import AuditConfig, LogitTables, audit, select
from specdec.conformance.audit.adapters.vllm import VLLMEngine
from specdec.conformance.audit.fixtures import audit_prompts, audit_target, save_checkpoint
from specdec.conformance.audit.report import markdown

FIX = "specdec.integrations.vllm.cpu_sampling"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    model = audit_target()
    ckpt = save_checkpoint(model, tmp_path_factory.mktemp("audit") / "model")
    config = AuditConfig(audit_prompts(model, 3), select(["temperature", "top_k", "repetition_penalty"]), samples=250,
                         max_tv=0.2)
    return model, ckpt, config, LogitTables(model, config.length), {}


def _audit(setup, method: str, cpu_expand: str):
    model, ckpt, config, tables, plain = setup
    engine = VLLMEngine(ckpt, method, cpu_expand=cpu_expand, python=sys.executable, fix_module=FIX)
    report = audit(engine, model, config, tables=tables, plain_outcomes=plain.get("outcomes"))
    plain.setdefault("outcomes", report.plain_outcomes)
    print(markdown([report]))
    return {c.setting: c for c in report.cases}, report


def _top_k_alone_breaks(cases, report):
    c = cases["top_k"]
    assert c.verdict.verdict == "error" and "numel() == 0" in c.message, markdown([report])


def test_custom_class_with_specdecs_fix_is_exact(setup):
    cases, report = _audit(setup, "custom_class", "as-shipped")
    for name in ("temperature", "repetition_penalty"):
        assert cases[name].verdict.verdict == "exact", markdown([report])
        assert cases[name].accepted_per_request > 0.25
    _top_k_alone_breaks(cases, report)


@pytest.mark.parametrize("method, cpu_expand", [("custom_class", "put-back-55005"), ("ngram", "as-shipped")])
def test_vllm_issue_55005_is_flagged(setup, method, cpu_expand):
    cases, report = _audit(setup, method, cpu_expand)
    t = cases["temperature"]
    assert (t.verdict.verdict, t.verdict.scope) == ("biased", "speculation"), markdown([report])
    assert min(x.p_value for x in t.two_sample) < 1e-12
    assert cases["top_k"].verdict.verdict in ("biased", "error"), markdown([report])


def test_ngram_with_specdecs_fix_is_exact(setup):
    cases, report = _audit(setup, "ngram", "specdec-fix")
    for name in ("temperature", "repetition_penalty"):
        assert cases[name].verdict.verdict == "exact", markdown([report])
    _top_k_alone_breaks(cases, report)


def test_cpu_sampler_kernel_draws_the_softmax_law():
    """vLLM's CPU sampler (``fused_gumbel_argmax``, what ``Sampler.sample`` runs on CPU) against the
    float64 softmax: 10**6 draws of one row, seeds as vLLM derives them from per-request generators
    are replaced by random 31-bit seeds (the kernel's input either way). docs/audit.md settles the
    control's 2-token p ~ 0.01 with this kernel at 10**7 draws."""
    import torch
    from vllm.platforms import current_platform

    from specdec.conformance import g_test

    current_platform.import_kernels()
    logits = torch.randn(16, generator=torch.Generator().manual_seed(0)) * 2
    n = 10 ** 6
    seeds = torch.randint(0, 2 ** 31, (n,), generator=torch.Generator().manual_seed(1), dtype=torch.long)
    tokens = torch.ops._C.fused_gumbel_argmax(logits.expand(n, 16).contiguous(), seeds)
    p = g_test(torch.bincount(tokens, minlength=16), torch.softmax(logits.double(), -1))[2]
    assert p > 1e-4, f"vLLM's CPU sampler does not draw the softmax law: p = {p}"
