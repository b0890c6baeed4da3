"""The statistical exactness suite: it passes the real samplers and rejects every mutant.

Sample sizes, alpha and measured power are documented in docs/exactness.md. All seeds are fixed,
so these tests are deterministic; ``FAMILY_ALPHA`` bounds the chance that a different seed would
reject an exact sampler.
"""

import pytest
import torch

from specdec.conformance.suite import (
    FAMILY_ALPHA,
    Case,
    batch_sampler,
    default_cases,
    g_test,
    padded_sampler,
    run_suite,
    simulate,
    single_sampler,
)
from specdec.conformance.laws import DraftSpec, ProcessedModel, TableModel, exact_law
from specdec.conformance.mutants import MUTANTS, kernel_sampler
from specdec.sampling.rejection import rejection_sample, rejection_sample_batch, rejection_sample_padded
from specdec.sampling.kernels import TreeSpeculative
from specdec.sampling.reference import reference_rejection_sample


pytestmark = pytest.mark.usefixtures("one_thread")


def _cases(names=None, trials=None):
    cases = default_cases()
    if names is not None:
        cases = [c for c in cases if c.name in names]
    if trials is not None:
        cases = [Case(c.name, c.target, c.draft, c.vocab, trials, c.prompt) for c in cases]
    return cases


def test_production_sampler_passes_full_suite():
    report = run_suite(padded_sampler(rejection_sample_padded))
    assert report.planned_tests == len(report.results) == 3 * len(default_cases())
    assert report.passed, report.summary()


def test_tree_kernel_passes_full_suite_on_chains_too():
    """The overridable kernel the mutants derive from is itself exact (chains routed through it)."""
    report = run_suite(kernel_sampler(TreeSpeculative()))
    assert report.passed, report.summary()


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_mutant_is_rejected(name):
    report = run_suite(kernel_sampler(MUTANTS[name]()), stop_at_first_failure=True)
    assert not report.passed, f"the suite cannot see mutant {name}:\n{report.summary()}"


LIST_API_CASES = ["chain3", "tree_mixed", "q_support_p_lacks"]


def test_list_api_passes():
    """rejection_sample_batch (DraftTree objects, per-tree target tensors) on a subset, fewer trials."""
    report = run_suite(batch_sampler(rejection_sample_batch), _cases(LIST_API_CASES, trials=4000))
    assert report.passed, report.summary()


def test_single_tree_api_and_reference_pass():
    for fn in (rejection_sample, reference_rejection_sample):
        report = run_suite(single_sampler(fn), _cases(["chain2", "tree_iid_siblings"], trials=2000))
        assert report.passed, f"{fn.__name__}\n{report.summary()}"


def test_greedy_rule_matches_temperature_zero_law():
    V = 5
    case = Case(
        "greedy",
        ProcessedModel(TableModel(V, 3, logits=True), 0.0),
        DraftSpec(TableModel(V, 2), ((-1, "sample"), (-1, "top"), (0, "sample"), (1, "top"))),
        V,
        trials=500,
    )
    report = run_suite(padded_sampler(rejection_sample_padded, rule="greedy"), [case])
    assert report.passed, report.summary()
    # and the greedy rule really is deterministic: every trial emits the same sequence
    seqs = simulate(padded_sampler(rejection_sample_padded, rule="greedy"), case)
    assert (seqs == seqs[0]).all()


def test_greedy_rule_on_sampled_target_is_rejected():
    """Greedy verification is not exact for a temperature-1 target: the suite must say so."""
    case = _cases(["chain2"], trials=4000)[0]
    report = run_suite(padded_sampler(rejection_sample_padded, rule="greedy"), [case])
    assert not report.passed


# ------------------------------------------------------------------ the suite's own parts
def test_exact_law_is_a_distribution_and_factorises():
    model = TableModel(4, seed=11)
    law = exact_law(model, (1,), 3, 4).view(4, 4, 4)
    assert abs(float(law.sum()) - 1) < 1e-12
    assert torch.allclose(law.sum((1, 2)), model((1,)))
    assert torch.allclose(law[2, 1].sum() / law[2].sum(), model((1, 2))[1])


def test_g_test_merges_sparse_cells_and_flags_impossible_ones():
    probs = torch.tensor([0.5, 0.49, 0.004, 0.004, 0.002, 0.0])
    counts = torch.tensor([250, 245, 2, 2, 1, 0])
    g, dof, p, imp = g_test(counts, probs)
    assert dof == 2 and p > 0.5 and imp == 0  # sparse cells (expected 2, 2, 1) pooled into one of 5
    # a pool still below 5 joins the smallest remaining cell
    assert g_test(torch.tensor([250, 246, 2, 2, 0, 0]), torch.tensor([0.5, 0.492, 0.004, 0.004, 0.0, 0.0]))[1] == 1
    assert g_test(torch.tensor([250, 245, 2, 2, 0, 1]), probs)[2] == 0.0


def test_g_test_rejects_a_shifted_law():
    probs = torch.tensor([0.25, 0.25, 0.25, 0.25])
    assert g_test(torch.tensor([1100, 1000, 1000, 900]), probs)[2] < 1e-3
    assert g_test(torch.tensor([1010, 1000, 995, 995]), probs)[2] > 0.5


def test_simulation_is_seed_deterministic():
    case = _cases(["tree_mixed"], trials=500)[0]
    a = simulate(padded_sampler(rejection_sample_padded), case, seed=3)
    b = simulate(padded_sampler(rejection_sample_padded), case, seed=3)
    assert torch.equal(a, b) and (a >= 0).all()


def test_family_alpha_is_documented_value():
    assert FAMILY_ALPHA == 0.01
    report = run_suite(padded_sampler(rejection_sample_padded), _cases(["chain1"], trials=200))
    assert report.per_test_alpha == pytest.approx(FAMILY_ALPHA / 3)


def test_malformed_sampler_output_is_refused():
    case = _cases(["chain2"], trials=50)[0]

    def emits_nothing(batch, generator):
        B = batch.tokens.shape[0]
        return torch.full((B, 1), -1), torch.zeros(B, dtype=torch.long)

    def emits_out_of_vocab(batch, generator):
        B = batch.tokens.shape[0]
        return torch.full((B, 1), case.vocab), torch.ones(B, dtype=torch.long)

    with pytest.raises(ValueError, match="between 1 and"):
        simulate(emits_nothing, case)
    with pytest.raises(ValueError, match="outside"):
        simulate(emits_out_of_vocab, case)


def test_vocabulary_too_large_for_prefix_codes_is_refused():
    big = Case("big", TableModel(200, 1), DraftSpec.chain(TableModel(200, 2), 6), 200, trials=10)
    with pytest.raises(ValueError, match="overflows"):
        simulate(padded_sampler(rejection_sample_padded), big)
