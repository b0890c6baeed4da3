"""Acceptance distributions: truncation to smaller budgets, replay measurement, merging."""

import numpy as np
import pytest

from specdec import DraftTree, ReplayProposer
from specdec.estimate.acceptance import AcceptanceDist, from_histogram
from specdec.measure.greedy_replay import greedy_accepted, measure_by_replay


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


def test_replay_with_the_targets_own_output_accepts_everything():
    prompts = {0: [1, 2, 3], 1: [4, 5]}
    outputs = {0: list(range(10, 30)), 1: list(range(40, 47))}
    d = measure_by_replay(ReplayProposer(outputs), prompts, outputs, budget=4)
    # 20 tokens: 4 steps of 4+1, then done; 7 tokens: one step of 4+1, then 1 accepted + 1 bonus
    assert d.counts.tolist() == [0, 1, 0, 0, 5]
    assert d.steps == 6


def test_replay_with_a_wrong_script_accepts_nothing():
    prompts = {0: [1, 2, 3]}
    outputs = {0: list(range(10, 20))}
    d = measure_by_replay(ReplayProposer({0: list(range(50, 60))}), prompts, outputs, budget=3)
    assert d.counts.tolist() == [10, 0, 0, 0]


def testgreedy_accepted_walks_tree_branches():
    tree = DraftTree.from_paths([[5, 6, 7], [5, 8], [9]])
    assert greedy_accepted(tree, [5, 8, 1]) == 2
    assert greedy_accepted(tree, [9, 9]) == 1
    assert greedy_accepted(tree, [1]) == 0
    assert greedy_accepted(DraftTree.empty(), [1]) == 0


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


class _HiddenOracle:
    """Proposer stub that needs hidden states and drafts the next ``k`` true tokens (or nothing)."""

    requires_target_hidden = True

    def __init__(self, truth, k):
        self.truth, self.k, self.pos, self.rows = truth, k, 0, []

    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None):
        assert target_hidden is not None and target_hidden.shape[0] == len(prompt_ids)
        self.pos = len(prompt_ids)

    def commit(self, req_id, accepted_ids, *, target_hidden=None):
        assert list(accepted_ids) == self.truth[self.pos: self.pos + len(accepted_ids)]
        assert target_hidden.shape[0] == len(accepted_ids)
        self.rows.append(target_hidden[:, 0].tolist())
        self.pos += len(accepted_ids)

    def propose(self, req_ids, budget):
        from specdec import DraftTree

        return [DraftTree.from_paths([self.truth[self.pos: self.pos + min(self.k, budget)]])
                if self.k else DraftTree.empty()]

    def end(self, req_id):
        pass


def test_replay_with_hidden_commits_the_decoders_rows():
    import torch

    from specdec.measure.greedy_replay import replay_with_hidden

    tokens = list(range(10, 22))  # 4 prompt tokens + 8 continuation tokens
    hidden = torch.arange(len(tokens), dtype=torch.float32).unsqueeze(1).repeat(1, 3)
    lazy = _HiddenOracle(tokens, 0)
    assert replay_with_hidden(lazy, hidden, tokens, 4, budget=4)[:2] == (7, 7)  # tokens[4] came from prefill
    # row j of each commit is the hidden state of the token that produced accepted_ids[j]
    assert lazy.rows[:3] == [[3.0], [4.0], [5.0]]
    oracle = _HiddenOracle(tokens, 3)
    emitted, steps, _ = replay_with_hidden(oracle, hidden, tokens, 4, budget=4)
    assert emitted == 7 and steps == 2  # 3 accepted + bonus, then the last 3 tokens
    assert oracle.rows[1] == [4.0, 5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="prompt_len must be in"):
        replay_with_hidden(oracle, hidden, tokens, len(tokens), budget=4)
