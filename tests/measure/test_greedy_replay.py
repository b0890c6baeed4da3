"""The one greedy replay loop (specdec.measure.greedy_replay): the accept rule, its bookkeeping over one
answer, whole sequences with and without hidden states, and acceptance histograms."""

import pytest

from specdec import DraftTree, ReplayProposer
from specdec.measure.greedy_replay import AnswerReplay, accepted_path, measure_by_replay, replay_sequence


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


def test_accepted_path_walks_tree_branches():
    tree = DraftTree.from_paths([[5, 6, 7], [5, 8], [9]])
    assert [int(tree.tokens[n]) for n in accepted_path(tree, [5, 8, 1])] == [5, 8]
    assert [int(tree.tokens[n]) for n in accepted_path(tree, [9, 9])] == [9]
    assert accepted_path(tree, [1]) == []
    assert accepted_path(DraftTree.empty(), [1]) == []


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
        return [DraftTree.from_paths([self.truth[self.pos: self.pos + min(self.k, budget)]])
                if self.k else DraftTree.empty()]

    def end(self, req_id):
        pass


def test_replay_sequence_commits_the_decoders_rows():
    import torch

    tokens = list(range(10, 22))  # 4 prompt tokens + 8 continuation tokens
    hidden = torch.arange(len(tokens), dtype=torch.float32).unsqueeze(1).repeat(1, 3)
    lazy = _HiddenOracle(tokens, 0)
    r = replay_sequence(lazy, tokens, 4, budget=4, hidden=hidden)
    assert (r.emitted, r.steps, r.accepted) == (7, 7, [0] * 7)  # tokens[4] came from prefill
    # row j of each commit is the hidden state of the token that produced accepted_ids[j]
    assert lazy.rows[:3] == [[3.0], [4.0], [5.0]]
    oracle = _HiddenOracle(tokens, 3)
    r = replay_sequence(oracle, tokens, 4, budget=4, hidden=hidden)
    assert (r.emitted, r.steps, r.accepted) == (7, 2, [3, 2])  # 3 accepted + bonus, then the last 3 tokens
    assert oracle.rows[1] == [4.0, 5.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="prompt_len must be in"):
        replay_sequence(oracle, tokens, len(tokens), budget=4, hidden=hidden)
    with pytest.raises(ValueError, match="reads target hidden states"):
        replay_sequence(oracle, tokens, 4, budget=4)


def test_replay_sequence_without_hidden_states_matches_measure_by_replay():
    prompt, answer = [1, 2, 3], [7, 8, 9, 10, 11, 12, 13, 14, 15]
    script = answer[:5] + [99] * 4  # right for 5 tokens, then wrong: drafts stop
    r = replay_sequence(ReplayProposer({"replay": script}), prompt + answer, len(prompt), budget=3)
    assert r.accepted == [3, 0, 0, 0, 0] and r.emitted == len(answer) - 1 and r.steps == 5
    # measure_by_replay has no prefill token: its answer starts one token earlier, drafted alike
    d = measure_by_replay(ReplayProposer({0: answer[1:5] + [99] * 4}), {0: prompt + answer[:1]}, {0: answer[1:]}, 3)
    assert d.counts.tolist() == [4, 0, 0, 1]


def test_answer_replay_commits_every_token_once_and_never_drafts_the_last():
    answer = [5, 8, 1, 4]
    committed = []
    replay = AnswerReplay(answer, lambda pos, ids: committed.append((pos, ids)))
    tree = DraftTree.from_paths([[5, 6, 7], [5, 8, 1, 4], [9]])  # the second branch holds the whole answer
    step = replay.step(tree)
    assert step.tokens == [5, 8, 1, 4] and step.accepted == 3  # the answer's last token is the target's own
    assert [int(tree.tokens[n]) for n in step.path] == [5, 8, 1] and step.pos == 0
    assert replay.done and committed == [(0, [5, 8, 1, 4])]
    with pytest.raises(ValueError, match="all replayed"):
        replay.step(tree)
    replay = AnswerReplay(answer, lambda pos, ids: committed.append((pos, ids)))
    committed.clear()
    assert [replay.step(DraftTree.empty()).accepted for _ in answer] == [0, 0, 0, 0]
    assert committed == [(0, [5]), (1, [8]), (2, [1]), (3, [4])] and replay.done
    replay = AnswerReplay(answer, lambda pos, ids: None)
    assert replay.step(DraftTree.from_paths([[9], [5, 8, 2]])).tokens == [5, 8, 1]  # mismatch at depth 2: bonus 1
    last = replay.step(DraftTree.chain([4]))
    assert (last.accepted, last.tokens) == (0, [4]) and replay.done  # the last token is never a draft's
