"""Proposer protocol pieces: the reference ReplayProposer, budgets, Artifact, pack_trees."""

import pytest
import torch

from specdec import Artifact, DraftTree, Proposer, ReplayProposer, pack_trees
from specdec.proposers.base import normalize_budgets


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
