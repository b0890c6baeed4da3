"""Proposer protocol pieces: the reference ReplayProposer, budgets, Artifact, pack_trees."""

import numpy as np
import pytest
import torch

from specdec import Artifact, DraftTree, Proposer, ReplayProposer, pack_trees
from specdec.checks import as_token_list, normalize_budgets


def test_replay_proposer_follows_script_then_stops_on_divergence():
    p = ReplayProposer({"a": [5, 6, 7, 8, 9]}, vocab_size=16)
    assert isinstance(p, Proposer)
    p.begin("a", [1, 2])
    (t,) = p.propose(["a"], 3)
    assert t.tokens.tolist() == [5, 6, 7] and t.is_chain and bool(t.deterministic.all())
    p.commit("a", [5, 6])
    assert p.propose(["a"], 10)[0].tokens.tolist() == [7, 8, 9]
    p.commit("a", [3])  # diverges from the script
    assert p.propose(["a"], 4)[0].num_nodes == 0
    p.end("a")
    with pytest.raises(KeyError, match="unknown request"):
        p.propose(["a"], 1)


def test_replay_proposer_rejects_bad_input():
    p = ReplayProposer({"a": [1]})
    with pytest.raises(KeyError, match="no script"):
        p.begin("b", [1])
    p.begin("a", [1])
    with pytest.raises(ValueError, match="already begun"):
        p.begin("a", [1])
    with pytest.raises(ValueError, match="negative"):
        p.commit("a", [-3])
    with pytest.raises(KeyError):
        p.end("zzz")


def test_budgets():
    assert normalize_budgets(["a", "b"], 3) == [3, 3]
    assert normalize_budgets(["a", "b"], [1, 0]) == [1, 0]
    with pytest.raises(ValueError, match="2 budgets for 3 requests"):
        normalize_budgets(["a", "b", "c"], [1, 2])
    with pytest.raises(ValueError, match=">= 0"):
        normalize_budgets(["a"], -1)
    import numpy as np

    assert normalize_budgets(["a", "b"], np.int64(2)) == [2, 2]
    assert normalize_budgets(["a"], torch.tensor(3)) == [3]
    assert normalize_budgets(["a", "b"], [np.int32(1), torch.tensor(0)]) == [1, 0]
    with pytest.raises(TypeError, match="integers"):
        normalize_budgets(["a"], [1.5])
    with pytest.raises(TypeError, match="an int or one int per request"):
        normalize_budgets(["a"], 1.5)


def test_artifact_binding_needs_fingerprint():
    assert Artifact("suffix").bound_to == "nothing"
    with pytest.raises(ValueError, match="no fingerprint"):
        Artifact("medusa", bound_to="target")
    with pytest.raises(ValueError, match="bound_to"):
        Artifact("x", bound_to="weights")


def test_pack_trees_pads_with_empty_mask_rows():
    a = DraftTree.chain([3, 4, 5])
    b = DraftTree(torch.tensor([7, 8]), torch.tensor([-1, -1]))
    e = DraftTree.empty()
    batch = pack_trees([a, b, e])
    assert batch.tokens.shape == (3, 3) and batch.sizes.tolist() == [3, 2, 0]
    assert batch.valid.tolist() == [[True] * 3, [True, True, False], [False] * 3]
    assert torch.equal(batch.ancestor_mask[0], a.ancestor_mask)
    assert batch.ancestor_mask[1, 2].item() == 0 and batch.ancestor_mask[2].abs().sum() == 0
    assert batch.position_offsets[0].tolist() == [0, 1, 2] and batch.position_offsets[1].tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="at least one"):
        pack_trees([])
    with pytest.raises(ValueError, match="expected DraftTree"):
        pack_trees([a, "b"])
    with pytest.raises(ValueError, match="different devices"):
        pack_trees([a, DraftTree.chain([1]).to("meta")])


def test_every_public_name_resolves():
    import specdec

    for name in specdec.__all__:
        assert getattr(specdec, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        specdec.Nope


@pytest.mark.parametrize("ids,exc,msg", [
    ([1, 2.7], TypeError, "integer token ids, got float 2.7"),
    ([True, 1], TypeError, "got bool True"),
    (torch.tensor([1.0]), TypeError, "torch.float32 tensor"),
    (torch.tensor([True]), TypeError, "torch.bool tensor"),
    (torch.tensor([[1]]), ValueError, "1-D"),
    ([0, -2], ValueError, "negative token id -2"),
    ([3, 10], ValueError, r"token id 10, outside the vocabulary \[0, 10\)"),
])
def test_token_lists_refuse_floats_bools_and_out_of_vocabulary_ids(ids, exc, msg):
    with pytest.raises(exc, match=msg):
        as_token_list(ids, "accepted_ids", 10)


def test_token_lists_accept_ints_numpy_ints_and_integer_tensors():
    assert as_token_list([1, np.int64(2)], "x", 10) == [1, 2]
    assert as_token_list(torch.tensor([3, 4], dtype=torch.int32), "x") == [3, 4]
    assert as_token_list(np.array([5, 6]), "x", 7) == [5, 6]
