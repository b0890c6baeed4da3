"""Hybrid suffix + EAGLE trees: exact decoding, the merge, hindsight calibration, the proposer spec."""

import argparse
import pytest
import torch
from hybrid_fixtures import FixedDraft

from specdec import Artifact, SpeculativeDecoder
from specdec.artifacts import Manifest, save_artifact, target_fingerprint
from specdec.cli.args import proposer_spec as check_spec
from specdec.control.sizer import VerifyCostModel
from specdec.models import tiny_model
from specdec.proposers.eagle import EagleProposer
from specdec.proposers.eagle3_layer import Eagle3Config, Eagle3Layer
from specdec.proposers.hybrid import HybridProposer
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.registry import make_proposer

LAYERS = (1, 3, 5)
CHEAP_VERIFY = VerifyCostModel([0, 8, 64], [1.0, 1.05, 1.5])


def _eagle(target, seed=0):
    torch.manual_seed(seed)
    layer = Eagle3Layer(Eagle3Config.from_target(target.config, LAYERS))
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.5)
    return EagleProposer(layer.eval(), target.get_input_embeddings().weight, target.get_output_embeddings().weight,
                         Artifact("eagle3", "target", target_fingerprint(target)), top_k=3, max_depth=3)


def _tree_paths(tree):
    """Sorted token paths of every node of ``tree``."""
    toks = tree.tokens.tolist()
    return sorted(tuple(toks[i] for i in tree.path_to(n)) for n in range(tree.num_nodes))


def _count_verified_model_nodes(dec, hyb):
    """Instrument one single-request decoder: ``counts["model"]`` grows by the verified nodes whose
    path the lookup part did not draft in that step (they can only be EAGLE's)."""
    counts, lookup = {"model": 0}, []
    suffix_propose, verify = hyb.suffix.propose_scored, dec.target.verify

    def suffix_scored(req_ids, budget):
        drafts = suffix_propose(req_ids, budget)
        lookup[:] = [set(_tree_paths(d.tree)) for d in drafts]
        return drafts

    def counted_verify(state, trees):
        (tree,) = trees
        counts["model"] += sum(p not in lookup[0] for p in _tree_paths(tree)) if lookup else 0
        lookup.clear()
        return verify(state, trees)

    hyb.suffix.propose_scored, dec.target.verify = suffix_scored, counted_verify
    return counts


def test_hybrid_greedy_decoding_equals_plain_on_repetitive_and_plain_prompts():
    """Equal outputs, and evidence that they tested something: in every case drafts were verified
    and accepted, and the EAGLE part drafted under its model gate (on by default) with nodes of its
    own verified. (A random EAGLE layer's nodes are rarely accepted; tests/test_eagle3.py shows its
    drafts accepted on their own.)"""
    target = tiny_model(seed=7, layers=6)
    for prompt in ([4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23], [9, 3, 27, 5]):
        plain = SpeculativeDecoder(target).generate(prompt, 30).tokens
        for budget in (6, "auto"):
            hyb = HybridProposer(SuffixProposer(64), _eagle(target, 1))
            # "auto" sizes from a fixed cheap verify curve: a timed one made the test depend on the machine's load
            dec = SpeculativeDecoder(target, hyb, budget=budget, max_budget=8, cost_model=CHEAP_VERIFY)
            assert dec.target.hidden_layers == LAYERS
            counts = _count_verified_model_nodes(dec, hyb)
            out = dec.generate(prompt, 30)
            assert out.tokens == plain, (prompt, budget)
            assert out.metrics.accepted > 0 and out.metrics.steps < len(plain), (prompt, budget, out.metrics.summary())
            assert hyb.model_gate is not None and hyb.model_gate.drafted > 0, (prompt, budget)
            assert counts["model"] > 0, (prompt, budget)


def test_merge_unions_paths_keeps_the_best_estimate_and_stays_prefix_closed():
    lookup = FixedDraft([[1], [1, 2], [3]], [0.9, 0.8, 0.1], hidden=False)
    model = FixedDraft([[1], [1, 4], [5]], [0.6, 0.5, 0.45])
    hyb = HybridProposer(lookup, model)
    hyb.begin("r", [0])
    draft = hyb.propose_scored(["r"], 4)[0]
    r = hyb.calibration("eagle").ratios(2)  # both sources start from the same prior
    assert hyb.calibration("suffix:x").ratios(2) == r
    toks = draft.tree.tokens.tolist()
    got = {tuple(toks[i] for i in draft.tree.path_to(n)): float(draft.node_probs[n]) for n in range(len(toks))}
    want = {(1,): 0.9 * r[0], (1, 2): 0.8 * r[1], (1, 4): 0.5 * r[1], (5,): 0.45 * r[0]}  # (3,) is the 5th best
    assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k]) for k in want)
    assert draft.source == "hybrid" and draft.tree.deterministic.all()
    assert draft.expected_accepted == pytest.approx(sum(want.values()))
    budget_one = hyb.propose_scored(["r"], 1)[0]
    assert _tree_paths(budget_one.tree) == [(1,)]


def test_hindsight_calibration_moves_budget_to_the_source_that_is_right():
    suffix = FixedDraft([[1], [1, 2]], [0.6, 0.5], hidden=False, source="request")
    model = FixedDraft([[3], [3, 4]], [0.9, 0.8])
    hyb = HybridProposer(suffix, model)
    hyb.begin("r", [0])
    first = hyb.propose_scored(["r"], 2)[0]
    assert _tree_paths(first.tree) == [(3,), (3, 4)]  # EAGLE's raw estimates are higher at first
    for _ in range(30):
        hyb.propose_scored(["r"], 2)
        hyb.commit("r", [1, 2, 9])  # the target emits the lookup's path every time
    assert _tree_paths(hyb.propose_scored(["r"], 2)[0].tree) == [(1,), (1, 2)]
    assert hyb.calibration("eagle").ratios(1)[0] < 0.2 < hyb.calibration("suffix:request").ratios(1)[0]


def test_hybrid_spec_is_accepted_and_loads_an_eagle_artifact(tmp_path):
    target = tiny_model(seed=8, layers=6)
    prop = _eagle(target)
    manifest = Manifest(kind="eagle", name="eagle3-test", bound_to="target", fingerprint=target_fingerprint(target),
                        config={"architecture": "eagle3", "layer": prop.layer.config.to_dict(),
                                "drafting": {"top_k": 2, "max_depth": 2, "min_prob": 0.01}})
    save_artifact(str(tmp_path), prop.layer.state_tensors(torch.float16), manifest)
    spec = f"hybrid:suffix+eagle:{tmp_path}"
    assert check_spec(spec) == spec
    hyb = make_proposer(spec, target, None)
    assert isinstance(hyb, HybridProposer) and hyb.target_layers == LAYERS and hyb.eagle.top_k == 2
    with pytest.raises(argparse.ArgumentTypeError, match="unknown proposer spec"):
        check_spec("hybrid:eagle")
    with pytest.raises(ValueError, match="model part"):
        HybridProposer(SuffixProposer(64), SuffixProposer(64))


def test_end_frees_the_model_part_even_when_the_lookup_part_raises():
    """A lookup part whose end raises must not leave the model part's request behind (a retry of
    end would then fail on the hybrid's own bookkeeping, and the model's state would never be freed)."""
    ended = []

    class Failing(FixedDraft):
        def end(self, req_id):
            raise RuntimeError("lookup end failed")

    class Tracking(FixedDraft):
        def end(self, req_id):
            ended.append(req_id)

    hyb = HybridProposer(Failing([[1]], [0.5], hidden=False), Tracking([[2]], [0.5]), model_gate=None)
    hyb.begin("r", [0])
    with pytest.raises(RuntimeError, match="lookup end failed"):
        hyb.end("r")
    assert ended == ["r"]
