"""Acceptance distributions: truncation to smaller budgets, merging, drafted-node records in the simulator."""

import numpy as np
import pytest

from specdec import ReplayProposer
from specdec.estimate.acceptance import AcceptanceDist, from_histogram
from specdec.measure.greedy_replay import measure_by_replay


def test_truncation_to_smaller_budget_moves_tail_mass_to_the_cap():
    d = AcceptanceDist(np.array([10, 20, 30, 40]))
    assert d.pmf(1).tolist() == pytest.approx([0.1, 0.9])
    assert d.expected_accepted(3) == pytest.approx(0.2 + 0.6 + 1.2)
    assert d.expected_tokens(0) == 1.0
    with pytest.raises(ValueError, match="exceeds the measured max_budget"):
        d.pmf(4)
    rng = np.random.default_rng(0)
    draws = d.sample(rng, 2, size=20000)
    assert np.bincount(draws, minlength=3) / 20000 == pytest.approx([0.1, 0.2, 0.7], abs=0.02)


def test_histogram_roundtrip_merge_and_errors():
    a = from_histogram([0, 1, 2, 2], 3, "a", 0.001)
    b = from_histogram([3, 3], 3, "b", 0.004)
    m = AcceptanceDist.merge([a, b], "ab")
    assert m.counts.tolist() == [1, 1, 2, 2] and m.propose_s_per_req == pytest.approx(0.002)
    assert AcceptanceDist.from_dict(m.to_dict()).counts.tolist() == m.counts.tolist()
    with pytest.raises(ValueError, match=r"\[0, 3\]"):
        from_histogram([4], 3)
    with pytest.raises(ValueError, match="no measured steps"):
        AcceptanceDist(np.zeros(3))
    with pytest.raises(ValueError, match="different max_budget"):
        AcceptanceDist.merge([a, from_histogram([1], 2)])
    assert 0 < m.token_acceptance_rate() < 1


def test_replay_records_drafted_nodes_and_sim_pays_only_for_them():
    from plan_fixtures import gpu_like_cost

    from specdec.plan.policies import AlwaysOn
    from specdec.plan.simulator import ServerConfig, simulate
    from specdec.plan.workload import SimRequest, WorkloadItem

    prompts = {0: [1, 2, 3]}
    outputs = {0: list(range(10, 20))}
    # script diverges after 4 tokens: afterwards the replay proposer drafts nothing
    d = measure_by_replay(ReplayProposer({0: list(range(10, 14)) + [99] * 6}), prompts, outputs, budget=3)
    assert d.drafted is not None and d.drafted[0] > 0 and np.all(np.cumsum(d.drafted) <= np.cumsum(d.counts))
    assert d.expected_max_drafted(3, 1) < 3 and d.expected_max_drafted(3, 64) > d.expected_max_drafted(3, 1)
    # Same acceptance and the same measured propose time (the load on the machine must not decide the
    # comparison), but assumed to draft the full budget.
    full = AcceptanceDist(d.counts, d.propose_s_per_req)
    reqs = [SimRequest(i, 0.0, WorkloadItem(8, 40)) for i in range(4)]
    sparse = simulate(reqs, AlwaysOn(3), ServerConfig(gpu_like_cost(), d, seed=1))
    dense = simulate(reqs, AlwaysOn(3), ServerConfig(gpu_like_cost(), full, seed=1))
    assert sparse.accepted <= sparse.drafted < dense.drafted
    assert sparse.busy_s < dense.busy_s
