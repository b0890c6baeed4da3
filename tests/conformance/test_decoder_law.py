"""The end-to-end law of the whole decoder: every proposer family passes, every engine mutant fails.

Each statistical test G-tests the joint law of generated tokens 1-3, 1-4, 1-5 and 3-5 (of 5) against
the exact law (``specdec.conformance.decoder_law``); cases, alpha and measured power are in
``tests/conformance/decoder_law_cases.py`` and docs/exactness.md. All seeds are fixed, so the tests are
deterministic; ``PER_TEST_ALPHA`` (Bonferroni over every exact-decoder test here, fast and slow)
bounds at 1 % the chance that other seeds would reject an exact decoder somewhere in this file.
"""

from dataclasses import replace

import pytest
import torch
from decoder_law_cases import (EXACT_SPECS, MUTANT_SPECS, PER_TEST_ALPHA, PLANNED_TESTS, UNIFORM, V, VARIANT_SPECS,
                               Spec, case, seed_of, target_model)

from specdec import DraftTree
from specdec.conformance.decoder_law import WINDOWS, check_decoder, exact_decoder_law
from specdec.conformance.engine_mutants import ReversedPathCompaction, ReverseInPlaceCompaction
from specdec.conformance.targets import context_dependence
from specdec.engine.decoder import SpeculativeDecoder
from specdec.proposers.suffix import SuffixProposer
from specdec.sampling.params import SamplingParams
from specdec.verify.hf import HFTarget


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return target_model()


def _param(spec: Spec):
    return pytest.param(spec, id=spec.name, marks=[pytest.mark.slow] if spec.slow else [])


def test_context_target_law_depends_on_the_whole_context(model):
    """The target's next-token law moves by TV >= 0.1 when a token 2, 3 or 4 back (or the last
    token's position) changes, and is far from a point mass."""
    dep = context_dependence(model)
    assert min(dep.tv[d] for d in (2, 3, 4)) >= 0.1, dep
    assert dep.position_tv >= 0.1 and dep.entropy >= 0.5, dep


def test_old_tiny_model_is_nearly_bigram():
    """Why the target above exists: the old tiny model barely sees older tokens or positions."""
    dep = context_dependence(target_model(old=True))
    assert max(dep.tv[d] for d in (2, 3, 4)) < 0.05 and dep.position_tv < 0.01, dep


def test_exact_law_matches_step_by_step_conditionals(model):
    """The enumerated law is a distribution whose 1-token marginal and 2-token conditionals are the
    processed next-token laws of separate forwards."""
    sampling = SamplingParams(0.7, top_k=4)
    prompt = [4, 1, 6]
    law = exact_decoder_law(model, prompt, 3, sampling).view(V, V, V)
    assert abs(float(law.sum()) - 1) < 1e-6

    def next_law(seq):
        with torch.no_grad():
            return sampling.process(model(input_ids=torch.tensor([seq])).logits[0, -1].float()).double()

    first = next_law(prompt)
    torch.testing.assert_close(law.sum((1, 2)), first, atol=1e-6, rtol=0)
    for t in range(V):
        if first[t] > 0:
            torch.testing.assert_close(law[t].sum(1) / first[t], next_law(prompt + [t]), atol=1e-5, rtol=0)


def test_planned_tests_cover_every_exact_case():
    assert PLANNED_TESTS == len(WINDOWS) * (len(EXACT_SPECS) + len(VARIANT_SPECS))
    assert len({s.name for s in EXACT_SPECS + VARIANT_SPECS + MUTANT_SPECS}) == len(EXACT_SPECS + VARIANT_SPECS
                                                                                  + MUTANT_SPECS)


@pytest.mark.parametrize("spec", [_param(s) for s in EXACT_SPECS + VARIANT_SPECS])
def test_exact_decoder_follows_the_target_law(model, spec):
    """Also what the case claims to run: drafts accepted, the target in the case's dtype, and the
    hybrid's model gate both drafting EAGLE and skipping it."""
    scenario, built = case(model, spec), []
    results, stats = check_decoder(replace(scenario, decoder=lambda: built.append(scenario.decoder()) or built[-1]),
                                   seed=seed_of(spec))
    assert stats.accepted > 0, f"{spec.name}: no draft token was ever accepted, the case proves nothing"
    (decoder,) = built
    assert decoder.target.dtype == getattr(torch, spec.dtype) and decoder.target.model.dtype == decoder.target.dtype
    if spec.family == "hybrid":
        gate = decoder.proposer.model_gate
        assert gate.drafted > 0 and gate.skipped > 0, (spec.name, gate.drafted, gate.skipped)
    failures = [str(r) for r in results if r.p_value < PER_TEST_ALPHA]
    assert not failures, f"{spec.name} rejected at per-test alpha {PER_TEST_ALPHA:.2e}: {failures}"


@pytest.mark.parametrize("spec", [_param(s) for s in MUTANT_SPECS])
def test_every_engine_mutant_is_rejected(model, spec):
    results, _ = check_decoder(case(model, spec), seed=seed_of(spec))
    assert min(r.p_value for r in results) < PER_TEST_ALPHA, f"the law test cannot see {spec.name}: {results}"


def _scripted_step(target_cls, model):
    """Prefill two requests (one with a hole), verify a tree with a non-leading path, accept it,
    then verify a 2-node tree: returns the cache after the accept and the second step's logits."""
    target = target_cls(model)
    state, _, _ = target.prefill([[1, 2, 3, 4], [1, 2, 3]])
    target.set_pending(state, [5, 6])
    tree = DraftTree(torch.tensor([1, 2, 3, 4]), torch.tensor([-1, -1, 0, 1], dtype=torch.int32))
    target.verify(state, [tree, tree])
    target.commit(state, [[1, 3], [1, 3]], [0, 7])
    keys = [layer.keys.clone() for layer in state.cache.layers]
    chain = DraftTree(torch.tensor([2, 5]), torch.tensor([-1, 0], dtype=torch.int32))
    return keys, state.lengths, target.verify(state, [chain, chain]).logits


def test_reversed_path_compaction_is_an_equivalent_mutant(model):
    """Attention reads the committed rows as a set: storing the accepted rows in reversed order
    changes the cache's row order but no logit, so no law test can (or should) reject it."""
    keys, lengths, logits = _scripted_step(HFTarget, model)
    keys_r, lengths_r, logits_r = _scripted_step(ReversedPathCompaction, model)
    assert lengths == lengths_r and not torch.equal(keys[0][0, :, :lengths[0]], keys_r[0][0, :, :lengths[0]])
    torch.testing.assert_close(logits_r, logits, atol=1e-5, rtol=1e-5)


def test_reverse_in_place_compaction_really_loses_rows(model):
    """The mutant does what it claims: in both requests (one with a hole in the shared cache) node 1's
    row is lost under node 3's."""
    keys, lengths, _ = _scripted_step(HFTarget, model)
    keys_m, _, _ = _scripted_step(ReverseInPlaceCompaction, model)
    k, m = keys[0][:, 0, :, 0], keys_m[0][:, 0, :, 0]
    assert lengths == [7, 6]
    assert torch.equal(m[0, :5], k[0, :5]) and torch.equal(m[0, 5], k[0, 6]) and torch.equal(m[0, 6], k[0, 6])
    assert torch.equal(m[1, :4], k[1, :4]) and torch.equal(m[1, 4], k[1, 5]) and not torch.equal(m[1, 4], k[1, 4])


class _TreeOpSteps(HFTarget):
    """Counts verify steps routed through the tree-attention op (the op's kwargs were built)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.op_steps = 0

    def _tree_inputs(self, state, trees):
        out = super()._tree_inputs(state, trees)
        self.op_steps += out[3] is not None
        return out


@pytest.mark.parametrize("batch, calls", [(32, 1), (1, 20)])
def test_tree_op_cases_reach_the_tree_attention_op(model, batch, calls):
    """The tree-op cases really run the op: in a batch it verifies the drafting steps, holes or not
    (each request's prefix length is read by the kernel), and one request per call runs it on every
    step that drafts a tree that is not a plain chain (~40 % of the suffix proposer's steps)."""
    target = _TreeOpSteps(model, attention="tree_op")
    dec = SpeculativeDecoder(target, SuffixProposer(V), max_budget=6, budget=6)
    gen = torch.Generator().manual_seed(0)
    runs = [dec.generate_batch([list(UNIFORM[0])] * batch, 5, SamplingParams(1.0), stop_tokens=(), generator=gen)
            for _ in range(calls)]
    steps = sum(r.metrics.steps for results in runs for r in results)
    batch_steps = sum(max(r.metrics.steps for r in results) for results in runs)
    assert target.op_steps >= (batch_steps // 2 if batch > 1 else steps // 4), (target.op_steps, steps)
