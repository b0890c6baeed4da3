"""DraftTree and pack_trees: derived structure, packed ancestor mask, and every bad input the
issue lists (parent order, vocabulary, draft_probs shape / values, mixed devices)."""

import random

import pytest
import torch

from specdec import DraftTree, pack_trees
from specdec.tree import pack_mask, unpack_mask

V = 7


def _random_parents(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [-1 if i == 0 or rng.random() < 0.05 else rng.randrange(max(0, i - 40), i) for i in range(n)]


def _brute_force_ancestors(parents: list[int]) -> torch.Tensor:
    n = len(parents)
    dense = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            dense[i, j] = True
            j = parents[j]
    return dense


# ------------------------------------------------------------------ structure
def test_chain_structure():
    t = DraftTree.chain(torch.tensor([3, 1, 4]))
    assert t.parents.tolist() == [-1, 0, 1] and t.is_chain
    assert t.depth.tolist() == [1, 2, 3] and t.position_offsets.tolist() == [0, 1, 2]
    assert t.paths == [[0, 1, 2]] and t.deterministic.all()


def test_tree_children_paths_depth():
    t = DraftTree(torch.tensor([1, 2, 3, 4, 5]), torch.tensor([-1, -1, 0, 0, 3]), vocab_size=V)
    assert t.root_children == [0, 1] and t.children == [[2, 3], [], [], [4], []]
    assert t.paths == [[1], [0, 2], [0, 3, 4]]
    assert t.depth.tolist() == [1, 1, 2, 2, 3] and not t.is_chain


def test_from_paths_merges_prefixes_in_order():
    t = DraftTree.from_paths([[1, 2, 3], [1, 2, 4], [5]], vocab_size=V)
    assert t.tokens.tolist() == [1, 2, 3, 4, 5] and t.parents.tolist() == [-1, 0, 1, 1, -1]


@pytest.mark.parametrize("n,seed", [(257, 0), (300, 1), (520, 2)])
def test_ancestor_mask_over_256_nodes_matches_brute_force(n, seed):
    parents = _random_parents(n, seed)
    t = DraftTree(
        torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed)), torch.tensor(parents), vocab_size=V
    )
    expected = _brute_force_ancestors(parents)
    assert t.ancestor_mask.shape == (n, (n + 63) // 64) and t.ancestor_mask.dtype == torch.int64
    assert torch.equal(t.dense_ancestor_mask, expected)
    assert torch.equal(pack_mask(expected), t.ancestor_mask)
    # bit j of word j // 64: check a few bits directly, including bit 63 (the sign bit)
    for i in range(n):
        for j in (0, 63, 64, 127, n - 1):
            if j < n:
                word = int(t.ancestor_mask[i, j // 64]) & ((1 << 64) - 1)
                assert bool((word >> (j % 64)) & 1) == bool(expected[i, j])


def test_pack_unpack_roundtrip():
    dense = torch.rand(3, 5, 130, generator=torch.Generator().manual_seed(0)) < 0.5
    assert torch.equal(unpack_mask(pack_mask(dense), 130), dense)


def test_pack_trees_pads_and_masks():
    big = DraftTree(torch.zeros(70, dtype=torch.long), torch.tensor(_random_parents(70, 5)), vocab_size=V)
    small = DraftTree.chain(torch.tensor([4, 5, 6]))
    empty = DraftTree.empty(vocab_size=V)
    batch = pack_trees([small, big, empty])
    assert batch.tokens.shape == (3, 70) and batch.ancestor_mask.shape == (3, 70, 2)
    assert batch.sizes.tolist() == [3, 70, 0]
    assert batch.valid.sum(1).tolist() == [3, 70, 0]
    assert batch.tokens[0, :3].tolist() == [4, 5, 6] and (batch.tokens[0, 3:] == 0).all()
    assert (batch.parents[0, 3:] == -1).all() and (batch.ancestor_mask[0, 3:] == 0).all()
    assert (batch.ancestor_mask[2] == 0).all()
    assert torch.equal(batch.ancestor_mask[1], big.ancestor_mask)
    assert torch.equal(batch.ancestor_mask[0, :3, :1], small.ancestor_mask)
    assert torch.equal(batch.position_offsets[1], big.position_offsets)


def test_pack_trees_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        pack_trees([])
    with pytest.raises(ValueError, match="expected DraftTree"):
        pack_trees([DraftTree.chain(torch.tensor([1])), [1, 2]])


# ------------------------------------------------------------------ bad input
def test_parent_not_before_child():
    with pytest.raises(ValueError, match="parent < own index"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 1]), vocab_size=V)
    with pytest.raises(ValueError, match="parent < own index"):
        DraftTree(torch.tensor([1, 2, 3]), torch.tensor([-1, 2, 1]), vocab_size=V)  # a cycle 1 <-> 2


def test_parent_below_minus_one():
    with pytest.raises(ValueError, match="must be -1"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, -2]), vocab_size=V)


def test_token_out_of_vocabulary():
    with pytest.raises(ValueError, match="out of vocabulary"):
        DraftTree(torch.tensor([1, V]), torch.tensor([-1, 0]), vocab_size=V)
    with pytest.raises(ValueError, match="out of vocabulary"):
        DraftTree(torch.tensor([1, V]), torch.tensor([-1, 0]), torch.full((2, V), 1 / V))
    with pytest.raises(ValueError, match=">= 0"):
        DraftTree(torch.tensor([-3]), torch.tensor([-1]), vocab_size=V)


def test_non_integer_tokens_or_parents():
    with pytest.raises(ValueError, match="integer"):
        DraftTree(torch.tensor([1.0]), torch.tensor([-1]), vocab_size=V)
    with pytest.raises(ValueError, match="integer"):
        DraftTree(torch.tensor([1]), torch.tensor([-1.0]), vocab_size=V)


def test_shape_mismatches():
    with pytest.raises(ValueError, match="1-D"):
        DraftTree(torch.tensor([[1, 2]]), torch.tensor([[-1, 0]]), vocab_size=V)
    with pytest.raises(ValueError, match="parents must have shape"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1]), vocab_size=V)


@pytest.mark.parametrize("shape", [(V,), (3, V), (2, V, 1)])
def test_draft_probs_wrong_shape(shape):
    with pytest.raises(ValueError, match="draft_probs must have shape"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), torch.full(shape, 1 / V))


def test_draft_probs_vocab_disagrees_with_vocab_size():
    with pytest.raises(ValueError, match="vocab_size"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), torch.full((2, V), 1 / V), vocab_size=V + 1)


@pytest.mark.parametrize("bad,match", [(-0.1, "negative"), (float("nan"), "NaN"), (float("inf"), "inf")])
def test_draft_probs_invalid_values(bad, match):
    q = torch.full((2, V), 1 / V)
    q[1, 3] = bad
    with pytest.raises(ValueError, match=match):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), q)


def test_draft_probs_rows_must_sum_to_one():
    q = torch.full((2, V), 1 / V)
    q[0] *= 0.9
    with pytest.raises(ValueError, match="row 0 sums to"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), q)


def test_draft_probs_integer_dtype():
    with pytest.raises(ValueError, match="floating point"):
        DraftTree(torch.tensor([1]), torch.tensor([-1]), torch.ones(1, V, dtype=torch.long))


def test_sampled_token_needs_positive_draft_probability():
    q = torch.full((1, V), 1 / (V - 1))
    q[0, 2] = 0
    with pytest.raises(ValueError, match="probability"):
        DraftTree(torch.tensor([2]), torch.tensor([-1]), q)


def test_deterministic_row_must_be_zero_or_point_mass():
    q = torch.zeros(2, V)
    q[0, 1] = 1.0  # point mass on its own token: fine
    DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), q, torch.tensor([True, True]))
    q[1, 3] = 1.0  # point mass on another token
    with pytest.raises(ValueError, match="point mass"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), q, torch.tensor([True, True]))


def test_deterministic_flags_shape_and_dtype():
    with pytest.raises(ValueError, match="deterministic"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), deterministic=torch.tensor([1, 0]), vocab_size=V)


def test_mixed_devices_draft_probs():
    with pytest.raises(ValueError, match="different devices"):
        DraftTree(torch.tensor([1, 2]), torch.tensor([-1, 0]), torch.full((2, V), 1 / V, device="meta"))


@pytest.mark.parametrize("which", ["parents", "deterministic"])
def test_mixed_devices_parents_or_flags(which):
    kwargs = dict(parents=torch.tensor([-1, 0]), deterministic=torch.tensor([True, True]))
    kwargs[which] = kwargs[which].to("meta")
    with pytest.raises(ValueError, match="different devices"):
        DraftTree(torch.tensor([1, 2]), kwargs["parents"], deterministic=kwargs["deterministic"], vocab_size=V)


def test_trusted_constructor_matches_validated_one():
    tokens, parents = torch.tensor([4, 5, 6]), torch.tensor([-1, 0, 0], dtype=torch.int32)
    det = torch.ones(3, dtype=torch.bool)
    fast = DraftTree.trusted(tokens, parents, det, vocab_size=V)
    slow = DraftTree(tokens, parents, vocab_size=V)
    assert torch.equal(fast.ancestor_mask, slow.ancestor_mask) and fast.paths == slow.paths
    assert fast.tokens is tokens and fast.vocab_size == V and fast.draft_probs is None


def test_empty_sequences_make_an_empty_tree_and_float_lists_are_refused():
    assert DraftTree([], []).num_nodes == 0 and DraftTree.chain([]).num_nodes == 0
    with pytest.raises(ValueError, match="integer tensor"):
        DraftTree([1.5], [-1])
