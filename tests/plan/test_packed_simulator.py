"""The packed (vLLM V1-style) scheduler of the simulator and the packed step cost it charges."""

import numpy as np
import pytest
from plan_fixtures import good_acceptance, gpu_like_cost, poisson_requests, zero_acceptance

from specdec.estimate.step_cost import StepCostModel
from specdec.plan.policies import AlwaysOn, Off
from specdec.plan.simulator import ServerConfig, simulate
from specdec.plan.workload import SimRequest, WorkloadItem


def linear_cost() -> StepCostModel:
    # 10 ms a step, 1 ms a sequence, 2 ms a token; no attention, KV-read or multi-token terms
    return StepCostModel(np.array([0.010, 0.001, 0.002, 0.0, 0.0, 0.0]))


def test_packed_step_of_identical_pieces_equals_the_batched_step():
    cost = StepCostModel(np.array([0.01, 0.002, 0.0005, 1e-7, 1e-6, 0.003]))
    for b, n, c in ((1, 1, 0), (4, 1, 300), (8, 5, 120), (3, 17, 0)):
        assert cost.packed_step_time([(n, c)] * b) == pytest.approx(cost.step_time(b, n, c))
    # mixed pieces: one fixed term, each sequence its own work
    mixed = cost.packed_step_time([(1, 100), (5, 40), (200, 0)])
    parts = cost.step_time(1, 1, 100) + cost.step_time(1, 5, 40) + cost.step_time(1, 200, 0)
    assert mixed == pytest.approx(parts - 2 * cost.weights[0])
    assert cost.packed_step_time([]) == 0.0 and cost.packed_step_time([(0, 50)]) == 0.0
    with pytest.raises(ValueError, match="context >= 0"):
        cost.packed_step_time([(1, -1)])


def test_packed_lone_request_timing_is_exact():
    # prompt 40, 6 output tokens, nothing else running: first token after one 40-token prefill,
    # then 5 one-token decode steps
    cost = linear_cost()
    res = simulate([SimRequest(0, 1.0, WorkloadItem(40, 6))], Off(), ServerConfig(cost, zero_acceptance(),
                                                                                  scheduler="packed"))
    (rec,) = res.records
    prefill = 0.010 + 0.001 + 0.002 * 40
    decode = 0.010 + 0.001 + 0.002
    assert rec.first_token == pytest.approx(1.0 + prefill)
    assert rec.finish == pytest.approx(1.0 + prefill + 5 * decode)
    assert res.decode_steps == 5


def test_chunked_prefill_splits_a_long_prompt_over_the_token_budget():
    cost = linear_cost()
    server = ServerConfig(cost, zero_acceptance(), scheduler="packed", max_batched_tokens=16)
    (rec,) = simulate([SimRequest(0, 0.0, WorkloadItem(40, 2))], Off(), server).records
    # 16 + 16 + 8 prompt tokens over three steps, then one decode step
    want = 3 * 0.011 + 0.002 * 40
    assert rec.first_token == pytest.approx(want)
    assert rec.finish == pytest.approx(want + 0.013)


def test_prefill_rides_in_the_decode_step_instead_of_stalling_it():
    # a second request arriving mid-decode costs the first one its prompt's tokens inside one
    # step, not a separate prefill iteration: in the packed server the first request's TPOT grows
    # by exactly the prefill tokens' work spread over its steps
    cost = linear_cost()
    reqs = [SimRequest(0, 0.0, WorkloadItem(10, 21)), SimRequest(1, 0.05, WorkloadItem(30, 3))]
    packed = {r.rid: r for r in simulate(reqs, Off(), ServerConfig(cost, zero_acceptance(),
                                                                  scheduler="packed")).records}
    phased = {r.rid: r for r in simulate(reqs, Off(), ServerConfig(cost, zero_acceptance())).records}
    alone = simulate(reqs[:1], Off(), ServerConfig(cost, zero_acceptance(), scheduler="packed")).records[0]
    # request 1's 30 prompt tokens (0.060 s) plus its own two decode rows (2 x 0.003 s) ride in request 0's steps
    assert packed[0].finish - alone.finish == pytest.approx(0.002 * 30 + 0.001 * 3 + 0.002 * 2)
    # the phased server stops decoding for a whole prefill iteration (its fixed cost too)
    assert phased[0].finish > packed[0].finish


def test_packed_server_conserves_requests_and_tokens_under_load_with_drafts():
    reqs = poisson_requests(rate=40.0, n=120, seed=2, opt_out_fraction=0.2)
    server = ServerConfig(gpu_like_cost(), good_acceptance(), kv_capacity_tokens=4000, max_batch=16,
                          scheduler="packed", max_batched_tokens=256)
    for policy in (Off(), AlwaysOn(4)):
        res = simulate(reqs, policy, server)
        assert sorted(r.rid for r in res.records) == [r.rid for r in reqs]
        want = {r.rid: r.item.output_len for r in reqs}
        assert all(rec.output_tokens == want[rec.rid] for rec in res.records)
        assert all(r.arrival <= rec.first_token <= rec.finish for r, rec in
                   zip(sorted(reqs, key=lambda r: r.rid), sorted(res.records, key=lambda r: r.rid)))
        assert res.max_batch <= 16 and res.accepted <= res.drafted
    on = simulate(reqs, AlwaysOn(4), server)
    assert on.accepted > 0 and on.decode_steps < simulate(reqs, Off(), server).decode_steps


def test_server_config_refuses_unknown_scheduler_and_bad_budget():
    with pytest.raises(ValueError, match="scheduler"):
        ServerConfig(gpu_like_cost(), good_acceptance(), scheduler="orca")
    with pytest.raises(ValueError, match="max_batched_tokens"):
        ServerConfig(gpu_like_cost(), good_acceptance(), scheduler="packed", max_batched_tokens=0)


def test_policies_that_never_draft_run_on_cost_off_when_given():
    # an engine whose plain steps are slower with a drafter configured (vLLM without async scheduling)
    fast, slow = linear_cost(), StepCostModel(np.array([0.020, 0.001, 0.002, 0.0, 0.0, 0.0]))
    reqs = [SimRequest(0, 0.0, WorkloadItem(10, 11))]
    for scheduler in ("phased", "packed"):
        both = ServerConfig(slow, zero_acceptance(), scheduler=scheduler, cost_off=fast)
        assert both.cost_for(Off()) is fast and both.cost_for(AlwaysOn(2)) is slow
        off = simulate(reqs, Off(), both).records[0]
        assert off.finish == pytest.approx(simulate(reqs, Off(), ServerConfig(fast, zero_acceptance(),
                                                                             scheduler=scheduler)).records[0].finish)
        # a drafting policy with no acceptance pays the slow engine's steps
        on = simulate(reqs, AlwaysOn(2), both).records[0]
        assert on.finish > off.finish


def test_a_drafting_policy_pays_cost_no_draft_on_the_steps_it_chose_k_0():
    """A schedule drafting at 1 row and not at 2: the lone request's decode steps run on ``cost``, the
    steps of two rows on ``cost_no_draft`` (two requests at once); Off never uses it."""
    from specdec.plan.vllm.candidates import Candidate
    from specdec.plan.vllm.schedule import SchedulePolicy

    drafting, plain = linear_cost(), StepCostModel(np.array([0.001, 0.0001, 0.0002, 0.0, 0.0, 0.0]))
    lone = [SimRequest(0, 0.0, WorkloadItem(10, 11))]
    pair = [SimRequest(0, 0.0, WorkloadItem(10, 11)), SimRequest(1, 0.0, WorkloadItem(10, 11))]
    for scheduler in ("phased", "packed"):
        with_plain = ServerConfig(drafting, zero_acceptance(), scheduler=scheduler, cost_no_draft=plain)
        without = ServerConfig(drafting, zero_acceptance(), scheduler=scheduler)
        sched = SchedulePolicy(Candidate("s", "ngram", 2, schedule=((1, 1, 2), (2, 2, 0))))
        assert with_plain.step_cost(sched, 0) is plain and with_plain.step_cost(sched, 2) is drafting
        assert with_plain.step_cost(Off(), 0) is drafting  # Off runs on cost_off or cost, never on this
        one = [simulate(lone, sched, s).records[0].finish for s in (with_plain, without)]
        assert one[0] == pytest.approx(one[1])  # it always drafts alone: cost_no_draft never applies
        two = [max(r.finish for r in simulate(pair, sched, s).records) for s in (with_plain, without)]
        assert two[0] < 0.5 * two[1]  # two rows, K = 0: every decode step priced by the cheap model
        assert with_plain.scaled(2.0).cost_no_draft.weights == pytest.approx(2 * plain.weights)
