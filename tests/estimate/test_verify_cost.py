"""Cost model: budget choice from measured cost and expected acceptance; pruning keeps parents."""

import pytest
import torch

from specdec import DraftTree
from specdec.control.sizer import AcceptanceEstimator, DraftOverhead, VerifyCostModel, prune_tree
from specdec.models import tiny_model
from specdec.verify.hf import HFTarget

CPU = VerifyCostModel([0, 7, 15, 63], [0.056, 0.106, 0.122, 0.191])  # the 2-core CPU figures


def test_cost_interpolates_and_is_monotone():
    assert CPU.cost(0) == pytest.approx(0.056)
    assert CPU.cost(11) == pytest.approx(0.114)
    assert CPU.cost(127) > CPU.cost(63)
    noisy = VerifyCostModel([0, 1, 2], [1.0, 0.8, 1.2])
    assert noisy.seconds == [1.0, 1.0, 1.2]


def test_best_size_trades_acceptance_against_cost():
    assert CPU.best_size([]) == 0
    assert CPU.best_size([0.1, 0.05]) == 0  # +10% tokens for +13% time: not worth it
    assert CPU.best_size([0.3, 0.1]) == 1
    assert CPU.best_size([0.99] * 7 + [0.01] * 8) == 7
    assert CPU.best_size([0.97 ** d for d in range(1, 64)]) > 15
    flat = VerifyCostModel([0, 64], [1.0, 1.0])  # GPU-like: every draft node is free
    assert flat.best_size([0.05] * 10) == 10


def test_observed_steps_move_the_curve_toward_real_costs():
    model = VerifyCostModel([0, 1, 2, 4], [0.020, 0.022, 0.024, 0.028])  # calibrated: +10% for 1 node
    assert model.best_size([0.15]) == 1
    for _ in range(60):  # real steps with one drafted node cost +30%, plain steps as calibrated
        model.observe(1, 0.026)
        model.observe(0, 0.020)
    assert model.cost(1) == pytest.approx(0.026, rel=0.02) and model.cost(0) == pytest.approx(0.020, rel=0.01)
    assert model.best_size([0.15]) == 0  # now +15% tokens for +30% time: not worth it
    model.observe(3, 0.040)  # between sizes: both neighbours move, the curve stays monotone
    assert model.seconds == sorted(model.seconds)
    with pytest.raises(ValueError, match="observe needs"):
        model.observe(1, 0.0)


def test_decoder_refines_its_own_copy_of_the_cost_model():
    from specdec import SpeculativeDecoder
    from specdec.proposers.suffix import SuffixProposer

    target = HFTarget(tiny_model("llama"))
    given = VerifyCostModel([0, 1, 2, 4], [1e-6, 1.1e-6, 1.2e-6, 1.4e-6])
    dec = SpeculativeDecoder(target, SuffixProposer(target.vocab_size), cost_model=given)
    dec.generate([1, 2, 3, 1, 2, 3, 1, 2], max_new_tokens=12)
    assert given.seconds == [1e-6, 1.1e-6, 1.2e-6, 1.4e-6]  # the caller's model is untouched
    assert dec.live_cost is not given and dec.live_cost.seconds[0] > given.seconds[0]  # real steps are slower


def test_decoder_measures_a_curve_for_each_batch_size_once_unless_curves_are_given():
    from specdec import SpeculativeDecoder
    from specdec.proposers.suffix import SuffixProposer

    target = HFTarget(tiny_model("llama"))
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [4, 5, 6, 4, 5, 6], [7, 8, 7, 8, 7]]
    dec = SpeculativeDecoder(target, SuffixProposer(target.vocab_size), calibration_prefix=16)
    dec.generate_batch(prompts, max_new_tokens=6)
    measured = dec.cost_models[3]
    assert measured.batch == 3 and measured.sizes == [0, 1, 2, 4, 8, 16] and dec.cost_model.batch == 1
    dec.generate_batch(prompts, max_new_tokens=6)
    assert dec.cost_models[3] is measured  # measured once per decoder
    given = VerifyCostModel([0, 1, 2, 4], [1e-3, 1.1e-3, 1.2e-3, 1.4e-3])
    estimated = SpeculativeDecoder(target, SuffixProposer(target.vocab_size), cost_model=given, adapt=False)
    estimated.generate_batch(prompts, max_new_tokens=6)
    assert 3 not in estimated.cost_models and estimated.sizer.live_costs[3].seconds == given.for_batch(3).seconds
    three = VerifyCostModel([0, 1], [2e-3, 3e-3], batch=3)
    both = SpeculativeDecoder(target, SuffixProposer(target.vocab_size), cost_model=[given, three], adapt=False)
    assert both.ensure_cost_model(3).seconds == three.seconds and both.ensure_cost_model(2).seconds == three.seconds
    with pytest.raises(ValueError, match="one of them 1"):
        SpeculativeDecoder(target, None, cost_model=[three])
    with pytest.raises(TypeError, match="sequence of them"):
        SpeculativeDecoder(target, None, cost_model=[given, "fast"])


def test_draft_overhead_prices_out_marginal_drafts():
    model = VerifyCostModel([0, 1], [1.0, 1.05])
    assert model.best_size([0.1]) == 1  # 1.1 tokens for 1.05: worth it on verify time alone
    assert model.best_size([0.1], draft_overhead=0.1) == 0  # not once the step's extra work counts
    assert model.best_size([0.9], draft_overhead=0.1) == 1
    with pytest.raises(ValueError, match="draft_overhead must be >= 0"):
        model.best_size([0.5], draft_overhead=-1.0)


def test_draft_overhead_is_the_measured_difference_never_negative():
    o = DraftOverhead(min_samples=3)
    for _ in range(3):
        o.observe(False, 0.010)
    for _ in range(2):
        o.observe(True, 0.014)
    assert o.seconds == 0.0  # too few drafting steps yet
    o.observe(True, 0.014)
    assert o.seconds == pytest.approx(0.004)
    for _ in range(200):
        o.observe(True, 0.005)  # drafting steps got cheaper than plain ones: no negative overhead
    assert o.seconds == 0.0
    with pytest.raises(ValueError, match="cannot take"):
        o.observe(True, -1.0)


def test_decoder_measures_its_draft_overhead():
    from specdec import SpeculativeDecoder
    from specdec.proposers.suffix import SuffixProposer

    target = HFTarget(tiny_model("llama"))
    dec = SpeculativeDecoder(target, SuffixProposer(target.vocab_size),
                             cost_model=VerifyCostModel([0, 1, 2, 4], [1e-6, 1.1e-6, 1.2e-6, 1.4e-6]))
    res = dec.generate([1, 2, 3, 1, 2, 3, 1, 2], max_new_tokens=12)
    assert sum(dec.draft_overhead.counts) == res.metrics.steps and dec.draft_overhead.counts[1] > 0


def test_bad_cost_models_are_refused():
    with pytest.raises(ValueError, match="start at 0|starting at 0"):
        VerifyCostModel([1, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match="increase"):
        VerifyCostModel([0, 2, 2], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="positive"):
        VerifyCostModel([0, 1], [0.0, 1.0])


def test_prune_keeps_most_likely_prefix_closed_nodes():
    tree = DraftTree(torch.tensor([5, 6, 7, 8, 9]), torch.tensor([-1, 0, -1, 1, 2]))
    probs = [0.9, 0.8, 0.05, 0.7, 0.01]
    small = prune_tree(tree, probs, 3)
    assert small.tokens.tolist() == [5, 6, 8] and small.parents.tolist() == [-1, 0, 1]
    assert prune_tree(tree, probs, 9) is tree
    sampled = DraftTree.chain(torch.tensor([1, 2]), draft_probs=torch.full((2, 4), 0.25))
    with pytest.raises(ValueError, match="deterministic"):
        prune_tree(sampled, [0.5, 0.2], 1)


def test_estimator_learns_per_depth_rates():
    est = AcceptanceEstimator()
    chain = DraftTree.chain(torch.tensor([1, 2, 3, 4]))
    for _ in range(20):
        est.update(chain, 2)
    assert est.rate(1) > 0.9 and est.rate(2) > 0.9 and est.rate(3) < 0.1
    assert est.rate(10) == est.rate(3)  # untried depths borrow the deepest tried rate
    probs = est.path_probs(chain)
    assert probs == sorted(probs, reverse=True) and len(probs) == 4


def test_calibration_measures_every_size():
    model = VerifyCostModel.calibrate(HFTarget(tiny_model()), prefix_len=16, sizes=(0, 2, 8), repeats=1)
    assert model.sizes == [0, 2, 8] and all(s > 0 for s in model.seconds)
    assert model.seconds == sorted(model.seconds)


def test_calibration_of_several_rows_verifies_them_together():
    target = HFTarget(tiny_model())
    model = VerifyCostModel.calibrate(target, prefix_len=16, repeats=1, batch=3)
    assert model.batch == 3 and model.sizes == [0, 1, 2, 4, 8, 16] and all(s > 0 for s in model.seconds)
    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        VerifyCostModel([0, 1], [1.0, 1.0], batch=0)


def test_shared_size_weighs_every_row_against_the_batch_curve():
    """Rows are padded to the largest tree: one k for all, worth it only if the rows' gains together
    beat the batch forward's extra time."""
    one = VerifyCostModel([0, 1, 2, 4], [1.0, 1.0, 1.05, 1.1])  # one row: nodes nearly free
    four = VerifyCostModel([0, 1, 2, 4], [1.0, 1.4, 1.7, 2.3], batch=4)  # four rows: a node each is dear
    rows = [[0.9, 0.8], [0.1], [0.05], []]
    assert one.best_size(rows[1]) == 1  # alone, a 0.1 node pays
    assert four.best_shared_size(rows) == 0  # (4 + 0.9 + 0.1 + 0.05) / 1.4 < 4 / 1.0
    assert four.best_shared_size([[0.9, 0.8]] * 4) == 2  # (4 + 4 * 1.7) / 1.7 beats 1 node and none
    assert four.best_shared_size([[0.5]] * 4, draft_overhead=1.0) == 0
    assert one.best_shared_size([[0.3, 0.1]]) == one.best_size([0.3, 0.1])


def test_a_batch_curve_estimated_from_one_row_reads_the_same_token_count():
    one = VerifyCostModel([0, 1, 2, 4, 8, 16], [1.0, 1.0, 1.1, 1.2, 1.6, 2.4])
    four = one.for_batch(4)
    assert four.batch == 4 and four.sizes == one.sizes
    assert four.cost(0) == pytest.approx(one.cost(3)) and four.cost(1) == pytest.approx(one.cost(7))
    with pytest.raises(ValueError, match="derives from a one-row curve"):
        four.for_batch(2)


def test_cost_model_saves_and_loads(tmp_path):
    model = VerifyCostModel([0, 1, 4], [0.02, 0.021, 0.03], prefix_len=128, batch=2)
    model.save(tmp_path / "c.json")
    back = VerifyCostModel.load(tmp_path / "c.json")
    assert back == model
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a specdec verify cost file"):
        VerifyCostModel.load(tmp_path / "bad.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json: not valid JSON"):
        VerifyCostModel.load(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="cannot read verify cost file"):
        VerifyCostModel.load(tmp_path / "missing.json")
