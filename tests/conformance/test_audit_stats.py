"""The audit's statistics, laws and verdict rules, without any engine.

* the fast replicate tester equals the suite's window tests; the two-sample test holds its level on
  equal laws and rejects different ones;
* the enumerated law is a distribution whose conditionals are the profile's next-token laws, with
  penalties and stops; the Hugging Face profile is transformers' own processors;
* overlapping seeds are refused before any engine runs; verdicts never pass an inconclusive case.
"""

import math

import pytest
import torch

from specdec.conformance.audit import (AuditConfig, CallableEngine, Job, LogitTables, Sampling, audit,
                                       check_independent, request_seed)
from specdec.conformance.audit.fixtures import audit_prompts, audit_target
from specdec.conformance.audit.law import exact_law, pad_outputs, processed
from specdec.conformance.audit.processing import PROFILES
from specdec.conformance.audit.settings import SETTINGS, Mixed, select
from specdec.conformance.audit.stats import WindowTester, detectable_tv, flattened, two_sample_tests
from specdec.conformance.audit.verdict import decide
from specdec.conformance.suite import window_law_tests

pytestmark = pytest.mark.usefixtures("one_thread")
V = 8


@pytest.fixture(scope="module")
def model():
    return audit_target()


@pytest.fixture(scope="module")
def tables(model):
    return LogitTables(model, 4)


@pytest.fixture(scope="module")
def prompt(model):
    return audit_prompts(model, 1)[0]


def _draw(law, n, length, gen):
    codes = torch.multinomial(law.float(), n, replacement=True, generator=gen)
    return (codes.unsqueeze(1) // (V + 1) ** torch.arange(length - 1, -1, -1)) % (V + 1)


def test_window_tester_equals_the_suites_window_tests(tables, prompt):
    law = exact_law(tables[prompt], Sampling(0.9, stop_tokens=(3,)), PROFILES["vllm"])
    gen = torch.Generator().manual_seed(0)
    windows = ((1, 2), (1, 4), (2, 4))
    for n in (40, 400):
        seqs = [_draw(law, n, 4, gen), _draw(flattened(law), n, 4, gen)]
        want = [t.p_value for t in window_law_tests("x", [(s, law) for s in seqs], V + 1, windows)]
        codes = [sum(s[:, j] * (V + 1) ** (3 - j) for j in range(4)) for s in seqs]
        got = WindowTester([law, law], [n, n], V + 1, 4, windows).p_values(codes)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-300)


def test_two_sample_test_holds_its_level_and_sees_a_difference(tables, prompt):
    law = exact_law(tables[prompt], Sampling(0.9), PROFILES["vllm"])
    gen = torch.Generator().manual_seed(1)
    windows = ((1, 2), (1, 4))
    ps = [min(t.p_value for t in two_sample_tests("x", [(_draw(law, 300, 4, gen), _draw(law, 300, 4, gen))], V + 1,
                                                  windows)) for _ in range(60)]
    assert sum(p < 0.05 for p in ps) <= 10, ps  # two windows at 5% each: ~6 expected
    other = exact_law(tables[prompt], Sampling(1.3), PROFILES["vllm"])
    res = two_sample_tests("x", [(_draw(law, 600, 4, gen), _draw(other, 600, 4, gen))], V + 1, windows)
    assert min(t.p_value for t in res) < 1e-6


def test_perturbation_arm_reports_a_distance_it_can_see(tables, prompt):
    law = exact_law(tables[prompt], Sampling(0.9), PROFILES["vllm"])
    few = detectable_tv([law], [flattened(law)], [100], V + 1, 4, ((1, 4),), 1e-3, replicates=12, steps=4)
    many = detectable_tv([law], [flattened(law)], [2000], V + 1, 4, ((1, 4),), 1e-3, replicates=12, steps=4)
    assert many.min_tv is not None and many.min_tv < many.max_tv
    assert few.min_tv is None or few.min_tv > many.min_tv
    assert many.null_rejections <= 2


@pytest.mark.parametrize("name", ["temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                                  "logit_bias", "allowed_tokens", "stop_tokens"])
@pytest.mark.parametrize("prof", ["vllm", "hf", "llamacpp"])
def test_exact_law_is_the_product_of_the_profiles_next_token_laws(model, tables, prompt, name, prof):
    """Sums to one; P(t1, t2) / P(t1) is the processed law after prompt + t1, from a separate forward;
    after a stop token only END follows."""
    s = SETTINGS[name]
    law = exact_law(tables[prompt], s, PROFILES[prof]).view(V + 1, V + 1, V + 1, V + 1)
    assert abs(float(law.sum()) - 1) < 1e-9
    p = PROFILES[prof]

    def next_law(ctx):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([list(prompt) + ctx])).logits[0, -1:].float()
        out = torch.bincount(torch.tensor(ctx, dtype=torch.long), minlength=V).unsqueeze(0) if ctx else \
            torch.zeros(1, V, dtype=torch.long)
        return p.probs(logits, torch.bincount(torch.tensor(prompt), minlength=V), out, s)[0]

    first = law.sum((1, 2, 3))
    torch.testing.assert_close(first[:V], next_law([]), atol=1e-5, rtol=0)
    for t in range(V):
        if first[t] > 1e-3 and t not in s.stop_tokens:
            torch.testing.assert_close(law[t].sum((1, 2))[:V] / first[t], next_law([t]), atol=1e-4, rtol=0)
    for t in s.stop_tokens:
        assert float(law[t, :V].sum()) == 0 and float(law[t, V, V, V]) == pytest.approx(float(first[t]))


def test_hf_profile_is_transformers_own_processing(tables, prompt):
    from transformers.generation import logits_process as lp

    s = Sampling(0.7, top_k=5, top_p=0.8, min_p=0.1, repetition_penalty=1.4, logit_bias=((2, 1.0),), bad_tokens=(4,),
                 allowed_tokens=(0, 1, 2, 3, 4, 6))
    table = tables[prompt]
    rows = slice(0, 64)
    ours = processed(table, s, PROFILES["hf"])[rows, 2]
    ids = torch.cat([torch.tensor(prompt).expand(64, -1), table.cont[rows, :2]], 1)
    procs = [lp.SequenceBiasLogitsProcessor({(2,): 1.0}), lp.RepetitionPenaltyLogitsProcessor(1.4),
             lp.NoBadWordsLogitsProcessor([[4]], eos_token_id=None),
             lp.PrefixConstrainedLogitsProcessor(lambda b, x: [0, 1, 2, 3, 4, 6], num_beams=1),
             lp.TemperatureLogitsWarper(0.7), lp.TopKLogitsWarper(5), lp.TopPLogitsWarper(0.8),
             lp.MinPLogitsWarper(0.1)]
    scores = table.logits[rows, 2].clone()
    for proc in procs:
        scores = proc(ids, scores)
    torch.testing.assert_close(ours.float(), torch.softmax(scores, -1), atol=2e-6, rtol=0)


def test_profiles_disagree_where_the_engines_do(tables, prompt):
    """min-p before top-p (vLLM) and after it (Hugging Face) are different laws; so is a temperature
    applied after the truncations (llama.cpp)."""
    s = Sampling(1.0, top_p=0.6, min_p=0.3)
    laws = {name: exact_law(tables[prompt], s, PROFILES[name]) for name in PROFILES}
    assert float((laws["vllm"] - laws["hf"]).abs().sum()) > 0.01
    t = Sampling(0.5, top_p=0.6)
    assert float((exact_law(tables[prompt], t, PROFILES["hf"]) - exact_law(tables[prompt], t, PROFILES["llamacpp"]))
                 .abs().sum()) > 0.01


def test_outputs_after_a_stop_are_impossible_observations(tables, prompt):
    s = Sampling(0.9, stop_tokens=(6,), max_tokens=4)
    law = exact_law(tables[prompt], s, PROFILES["vllm"])
    good = pad_outputs([[6], [2, 6]], 4, V)
    bad = pad_outputs([[6, 2]], 4, V)  # a token emitted after the stop
    assert window_law_tests("x", [(good, law)], V + 1, ((1, 4),))[0].impossible == 0
    assert window_law_tests("x", [(bad, law)], V + 1, ((1, 4),))[0].impossible == 1


def test_overlapping_seeds_are_refused_before_any_engine_runs(model):
    calls = []

    def engine(prompts, sampling, n, seed, speculative):
        calls.append(speculative)
        return [[[0] * s.max_tokens for _ in range(n)] for s in sampling]

    prompts = audit_prompts(model, 1)
    config = AuditConfig(prompts, select(["temperature"]), samples=10, seed=5, plain_seed=5)
    with pytest.raises(ValueError, match="blind the two-sample test"):
        audit(CallableEngine(engine), model, config)
    near = AuditConfig(prompts, select(["temperature"]), samples=10, seed=0, plain_seed=9)
    with pytest.raises(ValueError, match="share seeds"):
        audit(CallableEngine(engine), model, near)
    assert calls == []
    a = [Job(((1,),), (Sampling(),), 10, 0)]
    check_independent(a, [Job(((1,),), (Sampling(),), 10, 10)])
    assert request_seed(100, 3, 4) == 112


def test_verdicts_never_pass_an_inconclusive_case():
    ok = dict(spec_rejected=False, plain_rejected=False, two_rejected=False, plain_ran=True, min_accepted=0.25,
              max_tv=0.1)
    assert decide(accepted_per_request=1.0, min_tv=0.05, **ok).verdict == "exact"
    for acc, tv in ((None, 0.05), (0.1, 0.05), (0.0, 0.05), (1.0, None), (1.0, 0.2)):
        v = decide(accepted_per_request=acc, min_tv=tv, **ok)
        assert v.verdict == "inconclusive" and not v.passed, (acc, tv)
    bad = dict(ok, two_rejected=True)
    assert decide(accepted_per_request=0.0, min_tv=None, **bad).verdict == "biased"
    eng = dict(ok, spec_rejected=True, plain_rejected=True)
    assert decide(accepted_per_request=1.0, min_tv=0.05, **eng).scope == "engine"
    unsplit = dict(ok, spec_rejected=True, plain_ran=False)
    assert decide(accepted_per_request=1.0, min_tv=0.05, **unsplit).scope == "unsplit"


def test_bad_settings_are_refused_by_name(model):
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0)
    with pytest.raises(ValueError, match="logit_bias"):
        Sampling(logit_bias=((1, math.inf),))
    with pytest.raises(ValueError, match="at least two"):
        Mixed((Sampling(),))
    with pytest.raises(ValueError, match="unknown setting"):
        select(["temperature", "warmth"])
    prompts = audit_prompts(model, 1)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        AuditConfig(prompts, {"x": Sampling(bad_tokens=(99,))}).check(V)
    with pytest.raises(ValueError, match="greedy"):
        AuditConfig(prompts, {"x": Sampling(0.0)}).check(V)
    with pytest.raises(ValueError, match="multiple"):
        AuditConfig(prompts, {"x": Sampling(n=4)}, samples=10).check(V)
