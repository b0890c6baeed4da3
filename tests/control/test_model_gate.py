"""The hybrid's model gate: EAGLE is skipped where, in hindsight, it added less than its drafting
time is worth, and still drafts where it adds tokens (and now and then where it did not)."""

import pytest
from hybrid_fixtures import FixedDraft

from specdec.control.interface import BatchView, Outcome
from specdec.control.model_gate import ModelGate
from specdec.proposers.hybrid import HybridProposer


def _commit(gate, req_id, bucket, gain, emitted):
    gate.observe(Outcome.of([0], [0], details={req_id: (bucket, gain, emitted)}))


def _timed(gate, **timings):
    gate.observe(Outcome.of([0], [0], timings=timings))


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run(lookup_paths, lookup_probs, emitted, steps=120):
    clock = _Clock()
    lookup = FixedDraft(lookup_paths, lookup_probs, hidden=False, clock=clock, source="request")
    model = FixedDraft([[1], [1, 2]], [0.6, 0.4], clock=clock, cost=0.010)
    hyb = HybridProposer(lookup, model, model_gate=ModelGate(clock=clock))
    hyb.begin("r", [0])
    for _ in range(steps):
        hyb.propose_scored(["r"], 8)
        clock.t += 0.050  # the verify step
        hyb.commit("r", emitted)
    return hyb, model.calls


def test_model_is_skipped_where_lookup_already_drafts_what_is_accepted():
    hyb, calls = _run([[1], [1, 2]], [0.99, 0.99], [1, 2, 9])
    gate = hyb.model_gate
    # every bucket the lookup passes through needs min_samples draws, then 1 in explore_every
    assert calls < 120 / 3, calls
    assert gate.skipped > 2 * gate.drafted
    assert 0.050 <= gate.period <= 0.060  # a step is 50 ms, plus 10 ms when the model drafted
    assert gate.model_seconds == pytest.approx(0.010)
    assert gate.batch_tokens(["r"]) == pytest.approx(3.0)  # 2 accepted + the target's own, every step
    assert gate.cost_tokens(3.0) == pytest.approx(0.010 / gate.period * 3)


def test_model_drafts_every_step_where_lookup_drafts_nothing_it_adds_tokens():
    hyb, calls = _run([], [], [1, 2, 9])
    assert calls == 120 and hyb.model_gate.skipped == 0
    assert max(hyb.model_gate.gain) == pytest.approx(2.0)


def test_a_model_node_matching_only_the_targets_own_token_adds_nothing():
    """Emitted [1] means no drafted node was accepted: the model's node [1] was not verified (the
    sizer cut it; verified, it would have been accepted). Counting it as a gain kept EAGLE drafting
    in categories where the decoder never verified its nodes."""
    hyb, calls = _run([], [], [1])
    assert max(hyb.model_gate.gain) == 0.0
    assert calls < 120 / 3, calls


def test_model_nodes_that_push_an_accepted_lookup_node_out_of_the_tree_count_against_it():
    """Budget 2: the model's [1], [1, 3] outrank lookup's [1, 2]; the target accepts 1 and emits 2 as
    its own token. Lookup alone would have had [1, 2] accepted, the merged tree had [1]: a gain of -1,
    not 0. (Scoring both sides against the accepted draft alone cannot see this: the merged tree
    always accepts all of it.)"""
    clock = _Clock()
    lookup = FixedDraft([[1], [1, 2]], [0.5, 0.45], hidden=False, clock=clock, source="request")
    model = FixedDraft([[1], [1, 3]], [0.9, 0.8], clock=clock, cost=0.010)
    hyb = HybridProposer(lookup, model, model_gate=ModelGate(clock=clock))
    hyb.begin("r", [0])
    (draft,) = hyb.propose_scored(["r"], 2)
    assert sorted(draft.tree.tokens.tolist()) == [1, 3]
    hyb.commit("r", [1, 2])
    assert min(hyb.model_gate.gain) == pytest.approx(-1.0)


def test_a_lookup_node_counts_against_the_target_token_only_when_the_merge_pushed_it_out():
    """Emitted (1, 2): [1] accepted, 2 the target's own token. A lookup node [1, 2] the merge offered
    and the sizer cut counts for 1 token (a lookup-only tree's sizer would have cut it too); one the
    model's nodes pushed out counts for 2 (offered, it would have been accepted)."""
    from specdec.proposers.hybrid import _gain, _Step

    lookup = [(1,), (1, 2)]
    assert _gain(_Step(lookup_paths=lookup, offered=[(1,), (1, 2), (1, 3)]), (1, 2)) == 0
    assert _gain(_Step(lookup_paths=lookup, offered=[(1,), (1, 3)]), (1, 2)) == -1
    assert _gain(_Step(lookup_paths=[(1,)], offered=[(1,), (1, 3)]), (1, 3, 9)) == 1  # the model's node added one


def test_the_models_price_has_the_feed_of_its_steps_but_not_of_a_prompt():
    """EAGLE feeds what was queued before it drafts. The feed of the steps since its last draft is part
    of a draft's price (one pass, which each skip saves); a request's prompt feed is a cost of the
    request, paid once, and must not enter the per-step price (it made each new request's first
    draft look 100 times dearer here)."""
    clock = _Clock()
    lookup = FixedDraft([], [], hidden=False, clock=clock, source="request")
    model = FixedDraft([[1], [1, 2]], [0.6, 0.4], clock=clock, cost=0.010, feed_cost=0.200, prompt_feed_cost=1.0)
    hyb = HybridProposer(lookup, model, model_gate=ModelGate(clock=clock))
    for r in ("a", "b"):  # the first draft of all is dropped as warm-up; b's first is not
        hyb.begin(r, [0])
        for _ in range(5):
            hyb.propose_scored([r], 8)
            hyb.commit(r, [1, 2, 9])
        hyb.end(r)
    steps = [0.210] * 4 + [0.010] + [0.210] * 4  # a's second to fifth, b's first (prompt fed apart), b's rest
    assert hyb.model_gate.model_seconds == pytest.approx(sum(steps) / len(steps))


def test_no_gate_drafts_both_every_step():
    clock = _Clock()
    lookup = FixedDraft([[1], [1, 2]], [0.99, 0.99], hidden=False, clock=clock)
    model = FixedDraft([[1]], [0.5], clock=clock, cost=0.01)
    hyb = HybridProposer(lookup, model, model_gate=None)
    hyb.begin("r", [0])
    for _ in range(50):
        hyb.propose_scored(["r"], 8)
        hyb.commit("r", [1, 2, 9])
    assert model.calls == 50


def test_gate_explores_a_skipping_bucket_and_checks_its_settings():
    clock = _Clock()
    gate = ModelGate(clock=clock, min_samples=2, explore_every=4)
    assert gate._should_draft(0, 1.0)  # nothing measured yet
    gate._step_started()
    clock.t = 1.0
    gate._step_started()
    _timed(gate, model=5.0)  # the first, cold draft is not counted
    assert gate.model_seconds is None
    _timed(gate, model=0.5)  # half a step, at 1 token per step: costs 0.5 tokens
    for _ in range(2):
        _commit(gate, "r", 0, 0.0, 1)
    decisions = [gate._should_draft(0, 1.0) for _ in range(8)]
    assert decisions == [False, False, False, True] * 2
    _commit(gate, "r", 1, 0.9, 1)
    _commit(gate, "r", 1, 0.9, 1)
    assert gate._should_draft(1, 1.0)  # adds more than it costs
    assert not gate._should_draft(1, 4.0)  # ... but not in a step that four such requests share
    with pytest.raises(ValueError, match="increasing"):
        ModelGate(edges=(1.0, 0.5))
    with pytest.raises(ValueError, match="increasing"):
        ModelGate(edges=(0.5, 0.5))
    with pytest.raises(ValueError, match="min_samples"):
        ModelGate(explore_every=0)
    with pytest.raises(ValueError, match="model_gate"):
        HybridProposer(FixedDraft([], [], hidden=False), FixedDraft([], []), model_gate="on")


def test_a_long_gap_between_steps_does_not_inflate_the_period():
    clock = _Clock()
    gate = ModelGate(clock=clock)
    for _ in range(20):
        gate._step_started()
        clock.t += 0.05
    clock.t += 5.0  # a prefill or an idle engine
    gate._step_started()
    assert gate.period < 0.06


def test_a_request_the_model_predicts_keeps_drafting_where_one_it_cannot_is_skipped():
    """Same lookup bucket for both: only the requests' own evidence tells prose (the model adds two
    tokens a step) from code (it adds none). With the bucket's mean alone both drafted every step."""
    clock = _Clock()
    lookup = FixedDraft([], [], hidden=False, clock=clock, source="request")
    model = FixedDraft([[1], [1, 2]], [0.6, 0.4], clock=clock, cost=0.020)
    hyb = HybridProposer(lookup, model, model_gate=ModelGate(clock=clock))
    emitted = {"prose": [1, 2, 9], "code": [5]}
    for r in emitted:
        hyb.begin(r, [0])
    for _ in range(160):
        hyb.propose_scored(list(emitted), 8)
        clock.t += 0.050
        for r, toks in emitted.items():
            hyb.commit(r, toks)
    gate = hyb.model_gate
    assert model.by_request["prose"] == 160
    assert model.by_request["code"] < 160 / 3, model.by_request
    assert gate.expected_gain(0, "code") < gate.cost_tokens(gate.batch_tokens(list(emitted))) < gate.expected_gain(
        0, "prose")
    hyb.end("code")
    assert gate.expected_gain(0, "code") == gate.gain[0]  # an ended request's evidence is dropped
    with pytest.raises(ValueError, match="request_prior"):
        ModelGate(request_prior=-1.0)


def test_without_request_evidence_the_bucket_mean_decides():
    gate = ModelGate(min_samples=2, request_prior=1.0)
    assert gate.expected_gain(0, "a") is None  # too few observations
    for _ in range(4):
        _commit(gate, "a", 0, 0.0, 1)
    _commit(gate, "b", 0, 1.0, 1)
    assert gate.expected_gain(0) == pytest.approx(0.2)
    assert gate.expected_gain(0, "a") == pytest.approx(0.2)  # its residuals are 0
    assert gate.expected_gain(0, "b") == pytest.approx(0.2 + 0.5 * 1.0)  # one residual of 1.0, shrunk by half
    early = ModelGate(min_samples=3)
    for _ in range(3):
        _commit(early, "x", 0, 5.0, 1)
    assert "x" not in early._residual  # no residual against a mean of fewer than min_samples gains
    _commit(early, "x", 0, 0.0, 1)
    assert early._residual["x"].n == 1


def test_a_skipped_request_still_explores_while_another_in_its_bucket_drafts():
    """Exploration is counted per request and bucket: a request that keeps drafting must not reset
    the count of one the gate skips (with one counter per bucket, B never drafted again)."""
    clock = _Clock()
    gate = ModelGate(clock=clock, min_samples=1, explore_every=4, request_prior=0.0)
    gate._step_started()
    clock.t = 1.0
    gate._step_started()
    _timed(gate, model=1.0)  # warm-up, dropped
    _timed(gate, model=0.5)  # costs 0.5 tokens at 1 token per step
    _commit(gate, "a", 0, 2.0, 1)  # the bucket's first value
    _commit(gate, "a", 0, 2.0, 1)  # a's residual: 0
    _commit(gate, "b", 0, -1.0, 1)  # b's residual: -3, trusted fully; the bucket's mean: 1.0
    decisions = []
    for _ in range(8):
        assert gate._should_draft(0, 1.0, "a")
        decisions.append(gate._should_draft(0, 1.0, "b"))
    assert decisions == [False, False, False, True] * 2
    gate.end("b")
    assert not any(k[0] == "b" for k in gate._skips)


def test_the_model_is_charged_the_verify_time_of_its_kept_nodes():
    """The decoder verifies some of the model's nodes: their verify time is part of its price, so a
    gain that repays the drafting alone no longer keeps the model drafting."""
    from specdec.estimate.verify_cost import VerifyCostModel
    from specdec.tree import DraftTree

    cost = VerifyCostModel([0, 1, 4], [0.040, 0.044, 0.056])  # 4 ms a node
    clock = _Clock()
    lookup = FixedDraft([[1]], [0.3], hidden=False, clock=clock, source="request")
    model = FixedDraft([[5], [5, 6], [7]], [0.5, 0.3, 0.2], clock=clock, cost=0.010)
    hyb = HybridProposer(lookup, model, model_gate=ModelGate(clock=clock))
    hyb.begin("r", [0])
    (draft,) = hyb.propose_scored(["r"], 8)
    assert draft.tree.num_nodes == 4  # lookup's [1] and the model's [5], [5, 6], [7]
    kept = DraftTree.trusted(*_tree([(1,), (5,), (5, 6)]), vocab_size=64)  # the sizer cut [7]
    hyb.observe_sized("r", kept, cost)
    assert hyb._last["r"].verify_extra == pytest.approx(cost.cost(3) - cost.cost(1))  # [5], [5, 6]
    hyb.commit("r", [5, 6, 9])
    assert hyb.model_gate.verify_seconds == pytest.approx(0.008)
    gate = hyb.model_gate
    gate._period.add(0.1, 1.0)
    gate._model.add(0.010, 1.0)
    assert gate.cost_tokens(2.0) == pytest.approx((0.010 + 0.008) / 0.1 * 2.0)
    # A step where the model did not draft charges nothing, and bad times are refused.
    hyb.model_gate = ModelGate(clock=clock, min_samples=1)
    hyb._last["r"].bucket = None
    hyb.observe_sized("r", kept, cost)
    assert hyb._last["r"].verify_extra is None
    with pytest.raises(ValueError, match="verify time"):
        _timed(ModelGate(), verify=-1.0)


def _tree(paths):
    """(tokens, parents, deterministic) of prefix-closed ``paths`` in order."""
    import torch

    index = {p: i for i, p in enumerate(paths)}
    tokens = torch.tensor([p[-1] for p in paths])
    parents = torch.tensor([index[p[:-1]] if len(p) > 1 else -1 for p in paths], dtype=torch.int32)
    return tokens, parents, torch.ones(len(paths), dtype=torch.bool)


def test_the_gate_decides_per_request_through_the_controller_interface():
    """decide() gives each request the cap or nothing, from its lookup expectation's bucket; a
    skipping bucket still explores; observe() takes commits and times."""
    clock = _Clock()
    gate = ModelGate(clock=clock, min_samples=1, explore_every=3)
    first = gate.decide(BatchView(2, req_ids=("a", "b"), cap=8, hints={"a": 0.1, "b": 5.0}))
    assert first.per_request == (8, 8) and first.budget == 8  # nothing measured: both draft
    clock.t = 1.0
    _timed(gate, model=1.0)  # warm-up, dropped
    _timed(gate, model=0.1)  # a tenth of a step: 0.5 tokens of a step emitting 5
    _commit(gate, "a", gate.bucket(0.1), 0.0, 1)  # the model added nothing in a's bucket
    _commit(gate, "b", gate.bucket(5.0), 3.0, 4)  # and three tokens in b's
    decisions = []
    for _ in range(6):
        clock.t += 1.0  # one step a second
        decisions.append(gate.decide(BatchView(2, req_ids=("a", "b"), cap=8, hints={"a": 0.1, "b": 5.0})).per_request)
    assert [d[1] for d in decisions] == [8] * 6
    assert [d[0] for d in decisions] == [0, 0, 8, 0, 0, 8]
    assert gate.decide(BatchView(1, req_ids=("a",), cap=0)).per_request == (0,)
