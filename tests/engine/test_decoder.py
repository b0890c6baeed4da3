"""SpeculativeDecoder: greedy exactness for every proposer, ragged batches, stops, streaming,
metrics, refusals, and the end-to-end sampling law on a tiny model."""

import time

import pytest
import torch
from helpers_proposers import RandomTreeProposer, SampledTreeProposer

from specdec import ReplayProposer
from specdec.conformance.suite import g_test
from specdec.conformance.laws import exact_law
from specdec.control.sizer import VerifyCostModel
from specdec.engine.decoder import SpeculativeDecoder
from specdec.sampling.params import SamplingParams
from specdec.models import tiny_model
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixDrafting

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5], [8, 9], [10, 11, 12, 13, 14, 15, 16, 10, 11]]
NEW = 24


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


@pytest.fixture(scope="module")
def reference(model):
    """model.generate greedy continuations (no EOS stop), the ground truth."""
    out = []
    for p in PROMPTS:
        g = model.generate(torch.tensor([p]), max_new_tokens=NEW, do_sample=False, eos_token_id=None, pad_token_id=0)
        out.append(g[0, len(p):].tolist())
    return out


def cheap_cost():
    """A fixed cost model (verify cost barely grows with size) so 'auto' verifies most drafts."""
    return VerifyCostModel([0, 64], [1.0, 1.2])


def check_all(decoder, reference, batch):
    if batch:
        results = decoder.generate_batch(PROMPTS, NEW, stop_tokens=())
    else:
        results = [decoder.generate(p, NEW, stop_tokens=()) for p in PROMPTS]
    for res, ref in zip(results, reference):
        assert res.tokens == ref
        assert res.finish_reason == "length"
    return results


@pytest.mark.parametrize("batch", [False, True])
def test_plain_matches_generate(model, reference, batch):
    results = check_all(SpeculativeDecoder(model), reference, batch)
    assert all(r.metrics.steps == NEW - 1 and r.metrics.drafted == 0 for r in results)


@pytest.mark.parametrize("batch", [False, True])
def test_replay_right_script_accepts_everything(model, reference, batch):
    prop = ReplayProposer({i: reference[i] for i in range(len(PROMPTS))})
    dec = SpeculativeDecoder(model, prop, max_budget=5, cost_model=cheap_cost())
    if batch:
        results = dec.generate_batch(PROMPTS, NEW, stop_tokens=(), req_ids=[0, 1, 2])
    else:
        results = [dec.generate(p, NEW, stop_tokens=(), req_id=i) for i, p in enumerate(PROMPTS)]
    for res, ref in zip(results, reference):
        assert res.tokens == ref
        m = res.metrics
        assert m.accepted_drafts_per_step > 4.0 and m.steps <= (NEW - 1 + 5) // 6 + 1
        assert sum(m.accepted_hist) == m.steps and m.tokens == NEW


def test_replay_wrong_script(model, reference):
    wrong = {i: [(t + 1) % 64 for t in reference[i][:5]] + reference[i][5:] for i in range(len(PROMPTS))}
    dec = SpeculativeDecoder(model, ReplayProposer(wrong), max_budget=4, budget=4)
    results = dec.generate_batch(PROMPTS, NEW, stop_tokens=(), req_ids=[0, 1, 2])
    for res, ref in zip(results, reference):
        assert res.tokens == ref
        assert res.metrics.accepted == 0


@pytest.mark.parametrize("batch", [False, True])
def test_random_trees_are_exact(model, reference, batch):
    results = check_all(SpeculativeDecoder(model, RandomTreeProposer(64), max_budget=12, budget=12), reference, batch)
    assert sum(r.metrics.accepted for r in results) > 0  # some random nodes were right: accepted paths committed


def test_suffix_proposer_is_exact(model, reference):
    dec = SpeculativeDecoder(model, SuffixProposer(64, drafting=SuffixDrafting(min_match_len=1, min_prob=0.0)),
                             max_budget=16, cost_model=cheap_cost())
    results = check_all(dec, reference, batch=True)
    assert sum(r.metrics.accepted for r in results) > 0


def test_each_requests_tenant_reaches_the_proposer(model, reference):
    """The Proposer protocol's isolation domain: the decoder passes each request's tenant to begin, so
    the suffix proposer's global cache partitions by it (a default of one shared tenant otherwise)."""
    seen = {}

    class Recording(SuffixProposer):
        def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None):
            seen[req_id] = tenant
            super().begin(req_id, prompt_ids, tenant=tenant, target_hidden=target_hidden)

    prop = Recording(64, drafting=SuffixDrafting(min_match_len=1, min_prob=0.0))
    dec = SpeculativeDecoder(model, prop, max_budget=16, cost_model=cheap_cost())
    dec.generate_batch(PROMPTS[:2], 4, stop_tokens=(), req_ids=["a", "b"], tenants=["t1", "t2"])
    dec.generate(PROMPTS[0], 4, stop_tokens=(), req_id="c")
    assert seen == {"a": "t1", "b": "t2", "c": None}
    assert prop.global_stats("t1")["documents"] == prop.global_stats("t2")["documents"] == 1
    with pytest.raises(ValueError, match="tenants must hold one entry per prompt"):
        dec.generate_batch(PROMPTS[:2], 4, tenants=["t1"])


def test_stop_tokens_and_max_new_tokens(model, reference):
    dec = SpeculativeDecoder(model, ReplayProposer({0: reference[0]}), max_budget=8, budget=8)
    stop = reference[0][6]
    first = reference[0].index(stop)
    res = dec.generate(PROMPTS[0], NEW, stop_tokens=[stop], req_id=0)
    assert res.tokens == reference[0][: first + 1] and res.finish_reason == "stop"
    res = dec.generate(PROMPTS[0], 3, stop_tokens=(), req_id=0)
    assert res.tokens == reference[0][:3] and res.finish_reason == "length"
    res = SpeculativeDecoder(model).generate(PROMPTS[1], 1, stop_tokens=())
    assert res.tokens == reference[1][:1] and res.metrics.steps == 0


def test_default_stop_tokens_follow_generation_config(model):
    prompt = PROMPTS[0]
    ref = model.generate(torch.tensor([prompt]), max_new_tokens=NEW, do_sample=False, pad_token_id=0)[0, len(prompt):]
    res = SpeculativeDecoder(model, RandomTreeProposer(64), max_budget=6, budget=6).generate(prompt, NEW)
    assert res.tokens == ref.tolist()
    assert res.metrics.accepted > 0  # drafted steps emitted several tokens at once, stop checked among them


def test_stream_yields_tokens_in_order(model, reference):
    dec = SpeculativeDecoder(model, ReplayProposer({7: reference[2]}), max_budget=3, budget=3)
    events = list(dec.stream(PROMPTS[2], NEW, stop_tokens=(), req_id=7))
    assert [t for ev in events for t in ev.tokens] == reference[2]
    assert events[-1].finished and not any(ev.finished for ev in events[:-1])
    assert events[-1].metrics.steps == len(events) - 1


def test_metrics_hist_and_times(model, reference):
    """The histogram adds up to the steps and the accepted drafts; every phase is timed and the phases
    fit inside the call's own wall clock (no time counted twice)."""
    dec = SpeculativeDecoder(model, ReplayProposer({0: reference[0][:10]}), max_budget=4, budget=4)
    t0 = time.perf_counter()
    m = dec.generate(PROMPTS[0], NEW, stop_tokens=(), req_id=0).metrics
    wall = time.perf_counter() - t0
    assert m.tokens == NEW and sum(m.accepted_hist) == m.steps
    assert m.accepted == sum(k * c for k, c in enumerate(m.accepted_hist)) > 0
    assert min(m.prefill_s, m.propose_s, m.verify_s, m.accept_s) > 0 and m.total_s <= wall, m.summary()
    assert m.depth_acceptance() == [sum(m.accepted_hist[d:]) / m.steps for d in range(1, len(m.accepted_hist))]


def test_bad_arguments_are_refused(model):
    dec = SpeculativeDecoder(model)
    with pytest.raises(TypeError, match="SamplingParams"):
        dec.generate([1, 2], 4, sampling={"temperature": 1.0, "repetition_penalty": 1.2})
    with pytest.raises(ValueError, match="max_new_tokens"):
        dec.generate([1, 2], 0)
    with pytest.raises(ValueError, match="outside"):
        dec.generate([1, 200], 4)
    with pytest.raises(ValueError, match="empty"):
        dec.generate([], 4)
    with pytest.raises(TypeError, match="tokenize"):
        dec.generate("hello", 4)
    with pytest.raises(ValueError, match="budget"):
        SpeculativeDecoder(model, RandomTreeProposer(64), budget="max")
    with pytest.raises(ValueError, match="req_ids"):
        dec.generate_batch([[1], [2]], 2, req_ids=[0, 0])


def test_sampling_law_end_to_end():
    """First 3 tokens emitted by the full decoder (sampled i.i.d.-sibling trees, temperature 0.8,
    top-k 6) follow the exact law of sampling the processed target token by token (G test). Three:
    the first comes from the prefill, and a step with one token left drafts nothing."""
    vocab, prompt, params = 8, [1, 2, 3], SamplingParams(temperature=0.8, top_k=6)
    model = tiny_model("llama", vocab_size=vocab, hidden_size=16, heads=2, kv_heads=1, seed=3)
    def target(prefix):
        with torch.no_grad():
            return params.process(model(torch.tensor([list(prefix)])).logits[0, -1].double())

    law = exact_law(target, prompt, 3, vocab)
    dec = SpeculativeDecoder(model, SampledTreeProposer(vocab, seed=1), max_budget=4, budget=4)
    gen = torch.Generator().manual_seed(0)
    trials, counts = 1500, torch.zeros(vocab**3)
    res = dec.generate_batch([prompt] * trials, 3, params, stop_tokens=(), generator=gen)
    for r in res:
        counts[(r.tokens[0] * vocab + r.tokens[1]) * vocab + r.tokens[2]] += 1
    assert sum(r.metrics.accepted for r in res) > 0
    g, dof, p_value, impossible = g_test(counts, law)
    assert impossible == 0 and dof >= 5
    assert p_value > 1e-3, f"G={g:.1f} dof={dof} p={p_value:.2g}"
    # Power: the same sample is told apart from the unprocessed (temperature 1, no top-k) law.
    raw = SamplingParams(temperature=1.0)

    def untempered(prefix):
        with torch.no_grad():
            return raw.process(model(torch.tensor([list(prefix)])).logits[0, -1].double())

    assert g_test(counts, exact_law(untempered, prompt, 3, vocab))[2] < 1e-3


def test_score_calibration_shrinks_overconfident_estimates_per_depth():
    from specdec.control.sizer import ScoreCalibration

    cal = ScoreCalibration()
    assert cal.apply([0.9, 0.5], [1, 2]) == [0.45, 0.25]  # unproven estimates count half
    for _ in range(200):
        cal.update([1.0, 1.0], [1, 2], 1)  # depth 1 always accepted, depth 2 never
    first, second = cal.apply([0.9, 0.9], [1, 2])
    assert first > 0.85 and second < 0.05  # one scale for both would have given ~0.45 each
    for _ in range(500):
        cal.update([0.5, 0.5], [1, 2], 2)  # under-confident: ratios are capped at 1
    assert cal.ratios(2)[0] == 1.0


def test_score_calibration_never_raises_a_child_over_its_parent():
    from specdec.control.sizer import ScoreCalibration

    cal = ScoreCalibration()
    for _ in range(100):
        cal.update([1.0], [1], 0)  # depth 1 is always rejected...
    cal.update([1.0, 1.0, 1.0], [1, 2, 3], 3)  # ...depth 3 once accepted
    r = cal.ratios(3)
    assert r[0] >= r[1] >= r[2]


def test_score_calibration_forgets_so_a_bad_start_does_not_end_speculation():
    from specdec.control.sizer import ScoreCalibration

    cal = ScoreCalibration()
    for _ in range(40):
        cal.update([1.0], [1], 0)
    assert cal.apply([1.0], [1])[0] < 0.1  # under the price of a node on a CPU: no more drafts
    for _ in range(2000):
        cal.tick()  # steps without drafting
    assert cal.apply([1.0], [1])[0] > 0.4  # back near the prior: the estimator is tried again


def test_closing_a_stream_early_releases_proposer_state(model):
    """A consumer that stops iterating (or an exception) must not leave the request open."""
    prop = SuffixProposer(model.config.vocab_size)
    dec = SpeculativeDecoder(model, prop, budget=4)
    it = dec.stream(PROMPTS[0], NEW, stop_tokens=(), req_id="x")
    next(it)
    next(it)
    it.close()
    assert prop.active_requests == 0
    assert len(dec.generate(PROMPTS[0], 5, stop_tokens=(), req_id="x").tokens) == 5  # the id is reusable


def test_int_budget_caps_sampled_trees(model):
    """Sampled trees cannot be pruned after drafting, so an int budget is passed to the proposer."""
    seen = []

    class Spy(SampledTreeProposer):
        def propose(self, req_ids, budget):
            trees = super().propose(req_ids, budget)
            seen.extend(t.num_nodes for t in trees)
            return trees

    dec = SpeculativeDecoder(model, Spy(model.config.vocab_size), budget=2)
    dec.generate(PROMPTS[1], 6, SamplingParams(temperature=1.0), stop_tokens=(),
                 generator=torch.Generator().manual_seed(0))
    assert seen and max(seen) <= 2


def test_nan_logits_are_an_error_not_a_token(model):
    dec = SpeculativeDecoder(model)
    broken = torch.full((1, model.config.vocab_size), float("nan"))
    with pytest.raises(ValueError, match="NaN logits"):
        dec._first_tokens(broken, None, None)


def test_a_single_nan_logit_in_a_read_row_is_found_and_padding_is_ignored():
    from specdec.sampling.kernels import checked_argmax as _checked_argmax

    gen = torch.Generator().manual_seed(0)
    for col in (0, 17, 63):  # wherever it sits, even beside a larger finite logit
        logits = torch.randn(2, 4, 64, generator=gen)
        logits[1, 2, col] = float("nan")
        logits[1, 2, (col + 5) % 64] = 1e30
        with pytest.raises(ValueError, match="NaN logits"):
            _checked_argmax(logits, torch.tensor([4, 3]))
        best = _checked_argmax(logits, torch.tensor([4, 2]))  # row 2 of request 1 is padding
        assert torch.equal(best[0], logits[0].argmax(-1))


class _TwoSourceProposer(ReplayProposer):
    """Scored drafts from two estimators, both claiming 0.9 per node: "good" drafts the script's
    next tokens, "bad" a wrong token. The decoder must calibrate them separately."""

    def __init__(self, scripts, vocab_size):
        super().__init__(scripts, vocab_size)
        self.calls = 0

    def propose_scored(self, req_ids, budget):
        from specdec.proposers.base import ScoredDraft

        out = []
        for tree in self.propose(req_ids, min(2, max(budget) if isinstance(budget, list) else budget)):
            self.calls += 1
            source = "good" if self.calls % 2 else "bad"
            if source == "bad" and tree.num_nodes:
                tree = type(tree).chain((tree.tokens + 1) % self._vocab_size, vocab_size=self._vocab_size)
            probs = torch.full((tree.num_nodes,), 0.9)
            out.append(ScoredDraft(tree, probs, float(probs.sum()), source))
        return out


def test_each_estimator_is_calibrated_against_its_own_acceptance(model, reference):
    prop = _TwoSourceProposer({0: reference[0]}, model.config.vocab_size)
    dec = SpeculativeDecoder(model, prop, budget=2)
    assert dec.generate(PROMPTS[0], NEW, stop_tokens=(), req_id=0).tokens == reference[0]
    good, bad = dec.calibrations["good"], dec.calibrations["bad"]
    assert sum(good.accepted) > 0 and sum(bad.accepted) == 0 and sum(bad.predicted) > 0
    assert bad.ratios(1)[0] < 0.5 < good.ratios(1)[0]  # the bad estimator does not drag the good one down


@pytest.mark.parametrize("prompt,exc,msg", [
    ("hello", TypeError, "tokenize it first"),
    ([], ValueError, "is empty"),
    ([3, 2.7], TypeError, "integer token ids, got float"),
    (torch.tensor([1.0, 2.0]), TypeError, "float32 tensor"),
    (torch.tensor([True]), TypeError, "bool tensor"),
    ([3, 64], ValueError, r"token id 64, outside the vocabulary \[0, 64\)"),
    ([-1, 3], ValueError, "negative token id -1"),
])
def test_bad_prompts_are_refused_with_the_reason(model, prompt, exc, msg):
    with pytest.raises(exc, match=msg):
        SpeculativeDecoder(model, None).generate(prompt, 4)


def test_scores_that_are_not_probabilities_are_refused(model, reference):
    class NaNScores(_TwoSourceProposer):
        def propose_scored(self, req_ids, budget):
            out = super().propose_scored(req_ids, budget)
            return [type(d)(d.tree, torch.full((d.tree.num_nodes,), float("nan")), float("nan"), d.source)
                    for d in out]

    dec = SpeculativeDecoder(model, NaNScores({0: reference[0]}, model.config.vocab_size), budget="auto",
                             cost_model=cheap_cost())
    with pytest.raises(ValueError, match="acceptance estimates must be probabilities"):
        dec.generate(PROMPTS[0], NEW, stop_tokens=(), req_id=0)


class _OneGoodOneBadProposer(ReplayProposer):
    """Scored drafts from ONE estimator, claiming 0.9 per node for every request: request 0's
    drafts are its script, request 1's are wrong tokens."""

    def propose_scored(self, req_ids, budget):
        from specdec.proposers.base import ScoredDraft

        out = []
        budgets = budget if isinstance(budget, list) else [budget] * len(req_ids)
        for req_id, tree in zip(req_ids, self.propose(req_ids, [min(3, b) for b in budgets])):
            if req_id == 1 and tree.num_nodes:
                tree = type(tree).chain((tree.tokens + 1) % self._vocab_size, vocab_size=self._vocab_size)
            probs = torch.full((tree.num_nodes,), 0.9)
            out.append(ScoredDraft(tree, probs, float(probs.sum()), "shared"))
        return out


def test_each_request_learns_its_own_acceptance(model, reference, monkeypatch):
    """Both requests draft from the same estimator, but each step's outcome is recorded in that
    request's own RequestCalibration (which also feeds the one shared calibration)."""
    from specdec.control.sizer import RequestCalibration

    seen = {}
    real = RequestCalibration.update

    def spy(self, probs, depths, accepted):
        seen.setdefault(id(self), (self, []))[1].append(accepted)
        real(self, probs, depths, accepted)

    monkeypatch.setattr(RequestCalibration, "update", spy)
    prop = _OneGoodOneBadProposer({0: reference[0], 1: reference[0]}, model.config.vocab_size)
    dec = SpeculativeDecoder(model, prop, cost_model=VerifyCostModel([0, 1, 4], [1.0, 1.1, 1.4]))
    good, bad = dec.generate_batch([PROMPTS[0], PROMPTS[0]], NEW, stop_tokens=(), req_ids=[0, 1])
    assert good.tokens == bad.tokens == reference[0]
    (cal_a, acc_a), (cal_b, acc_b) = seen.values()
    assert cal_a is not cal_b and cal_a.shared is cal_b.shared is dec.calibrations["shared"]
    assert sorted([sum(acc_a), sum(acc_b)]) == [0, good.metrics.accepted]
    bad_cal = cal_a if sum(acc_a) == 0 else cal_b
    assert bad_cal.ratios(1)[0] < bad_cal.shared.ratios(1)[0]  # its own misses count more than the pool's


def test_request_calibration_shrinks_toward_the_shared_one():
    from specdec.control.sizer import RequestCalibration, ScoreCalibration

    shared = ScoreCalibration()
    mine = RequestCalibration(shared=shared)
    assert mine.ratios(2) == shared.ratios(2)  # no evidence of its own yet
    for _ in range(20):
        mine.update([1.0], [1], 0)
    assert mine.ratios(1)[0] < shared.ratios(1)[0] < 0.5  # own misses weigh more; the shared one learns too
    assert sum(shared.predicted) == 20


@pytest.mark.parametrize("kwargs,msg", [
    ({"decay": 0.0}, "decay must be in"),
    ({"decay": 1.5}, "decay must be in"),
    ({"prior_predicted": 0.0}, "prior_predicted > 0"),
    ({"prior_accepted": 5.0}, "prior_accepted <= prior_predicted"),
])
def test_bad_calibration_settings_are_refused(kwargs, msg):
    from specdec.control.sizer import ScoreCalibration

    with pytest.raises(ValueError, match=msg):
        ScoreCalibration(**kwargs)


def test_bad_request_calibration_strength_is_refused():
    from specdec.control.sizer import RequestCalibration

    with pytest.raises(ValueError, match="strength must be > 0"):
        RequestCalibration(strength=0.0)


def test_a_scored_proposer_is_shown_each_sized_tree_and_the_cost_curve(model, reference):
    """``observe_sized``: the tree the decoder verifies (after its sizing) and its live cost curve,
    once per drafted request and step, before the commit of that step."""
    seen, order, same_step = [], [], []

    class Watching(SuffixProposer):
        commits = drafted_at = 0

        def propose_scored(self, req_ids, budget):
            self.drafted_at = self.commits
            return super().propose_scored(req_ids, budget)

        def observe_sized(self, req_id, tree, cost):
            seen.append((req_id, tree.num_nodes, cost))
            order.append("sized")
            same_step.append(self.commits == self.drafted_at)  # no commit between drafting and sizing

        def commit(self, req_id, accepted_ids, **kw):
            order.append("commit")
            self.commits += 1
            super().commit(req_id, accepted_ids, **kw)

    dec = SpeculativeDecoder(model, Watching(64, drafting=SuffixDrafting(min_match_len=1, min_prob=0.0)), max_budget=16,
                             cost_model=cheap_cost())
    res = dec.generate(PROMPTS[0], NEW, stop_tokens=())
    assert res.tokens == reference[0]
    assert seen and all(cost is dec.sizer.live_cost for _, _, cost in seen)
    assert sum(n for _, n, _ in seen) == res.metrics.drafted  # exactly the verified nodes
    # the prefill's token is committed first; then each sizing precedes its step's commit (the last
    # step's tokens finish the request: it ends without a commit)
    assert order[0] == "commit" and "sized sized" not in " ".join(order)
    assert all(same_step), same_step
