"""Unit tests for the rejection sampler: rules, edge cases, bad input, determinism.

The statistical exactness tests live in tests/conformance/test_suite.py; the few law checks here are
single-position checks with closed-form expectations, so a failure points at one rule.
"""

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from specdec import DraftTree
from specdec.sampling.rejection import (
    AcceptResult,
    Rule,
    rejection_sample,
    rejection_sample_batch,
    rejection_sample_padded,
)
from specdec.sampling.kernels import residual, sample_rows, sibling_links

V = 5


def _dist(*shape, seed=0, scale=1.5):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(*shape, generator=g) * scale, -1)


def _gtest(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of a G test of ``counts`` against ``probs`` (cells with zero probability must be empty)."""
    n = counts.sum().item()
    assert counts[probs == 0].sum() == 0, "a zero-probability token was emitted"
    keep = probs > 0
    c, e = counts[keep].double(), probs[keep].double() * n
    g = 2 * (c[c > 0] * (c[c > 0] / e[c > 0]).log()).sum().item()
    return stats.chi2.sf(g, int(keep.sum()) - 1) if keep.sum() > 1 else 1.0


def test_rules_are_labelled_exact():
    assert {r.name for r in Rule} >= {"GREEDY", "CHAIN", "TREE_SAMPLED", "TREE_DETERMINISTIC", "TREE_MIXED"}
    assert all(r.exact for r in Rule)


def test_greedy_chain_matches_argmax_and_stops_at_first_mismatch():
    p = _dist(4, V)
    am = p.argmax(-1)
    tokens = torch.stack([am[0], am[1], (am[2] + 1) % V])
    res = rejection_sample(DraftTree.chain(tokens), p, rule="greedy")
    assert res.tokens.tolist() == [am[0].item(), am[1].item(), am[2].item()]
    assert res.path.tolist() == [0, 1]
    assert res.rule is Rule.GREEDY


def test_greedy_ties_follow_torch_argmax_first_index():
    logits = torch.tensor([[0.0, 3.0, 3.0, -math.inf, 1.0]])
    res = rejection_sample(DraftTree.empty(vocab_size=V), logits, rule="greedy")
    assert res.tokens.tolist() == [1] == [int(torch.argmax(logits[0]))]


def test_greedy_tree_takes_first_matching_child():
    p = _dist(4, V, seed=3)
    am = p.argmax(-1).tolist()
    other = (am[0] + 1) % V
    # node0 (wrong) and node1 (= argmax of row 0) under the root; node2 (= argmax of row 2) under node1
    tree = DraftTree(torch.tensor([other, am[0], am[2]]), torch.tensor([-1, -1, 1]), vocab_size=V)
    res = rejection_sample(tree, p, rule="greedy")
    assert res.path.tolist() == [1, 2]
    assert res.tokens.tolist() == [am[0], am[2], am[3]]


def test_one_hot_target_equals_greedy_for_sampled_drafts():
    p = _dist(4, V, seed=5)
    onehot = torch.nn.functional.one_hot(p.argmax(-1), V).float()
    q = _dist(3, V, seed=6)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        toks = torch.multinomial(q, 1, generator=g).squeeze(1)
        tree = DraftTree.chain(toks, q)
        a = rejection_sample(tree, onehot, generator=g)
        b = rejection_sample(tree, p, rule="greedy")
        assert a.tokens.tolist() == b.tokens.tolist()


def test_p_equals_q_accepts_every_draft():
    q = _dist(4, V, seed=1)
    g = torch.Generator().manual_seed(1)
    for _ in range(50):
        toks = torch.multinomial(q[:3], 1, generator=g).squeeze(1)
        res = rejection_sample(DraftTree.chain(toks, q[:3]), q, generator=g)
        assert res.num_accepted == 3


def test_token_with_zero_target_probability_is_never_emitted():
    p = _dist(3, V, seed=2)
    p[:, 1] = 0
    p = p / p.sum(-1, keepdim=True)
    q = torch.zeros(2, V)
    q[:, 1] = 1.0  # q only proposes what p forbids
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        res = rejection_sample(DraftTree.chain(torch.tensor([1, 1]), q), p, generator=g)
        assert res.num_accepted == 0 and res.tokens.item() != 1


def test_residual_underflow_falls_back_to_p():
    p = torch.tensor([[0.2, 0.3, 0.5]])
    r, m = residual(p, torch.ones(1), p.clone())
    assert torch.equal(r, p) and m.item() == 1.0
    r, m = residual(p, torch.ones(1), torch.tensor([[0.1, 0.3, 0.6]]))
    assert torch.allclose(r, torch.tensor([[0.1, 0.0, 0.0]])) and abs(m.item() - 0.1) < 1e-7


def test_sample_rows_never_picks_zero_weight():
    w = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0], [1.0, 0.0, 0.0, 0.0]]).repeat(200, 1)
    out = sample_rows(w, torch.Generator().manual_seed(0)).view(200, 3)
    assert (out == torch.tensor([1, 3, 0])).all()


def test_sibling_links():
    parents = torch.tensor([[-1, -1, 0, 0, 1, -1], [-1, 0, -1, 0, 0, 0]])
    first, nxt = sibling_links(parents, torch.tensor([6, 3]))
    assert first[0].tolist() == [0, 2, 4, -1, -1, -1, -1]
    assert nxt[0].tolist() == [1, 5, 3, -1, -1, -1]
    assert first[1].tolist() == [0, 1, -1, -1, -1, -1, -1]
    assert nxt[1].tolist() == [2, -1, -1, -1, -1, -1]


def test_first_token_law_chain_and_tree():
    """Emitted first token ~ p[0] for a sampled chain and a mixed tree (G test, alpha 1e-4 each)."""
    T = 40000
    g = torch.Generator().manual_seed(7)
    p = _dist(5, V, seed=8)
    q = _dist(4, V, seed=9, scale=1.0)
    qs = q.unsqueeze(0).expand(T, 4, V)
    tok = torch.multinomial(qs.reshape(-1, V), 1, generator=g).view(T, 4)
    tok[:, 2] = 3  # deterministic node
    det = torch.tensor([False, False, True, False]).expand(T, 4)
    for parents in ([-1, 0, 1, 2], [-1, -1, -1, 0]):
        if parents[1] == -1:
            tok_b = tok.clone()
            tok_b[:, 1] = torch.multinomial(q[0].expand(T, V), 1, generator=g).squeeze(1)
            dp = qs.clone()
            dp[:, 1] = q[0]
        else:
            tok_b, dp = tok, qs
        dp = torch.where(det.unsqueeze(2), torch.nn.functional.one_hot(tok_b, V).float(), dp)
        res = rejection_sample_padded(
            tok_b,
            torch.tensor(parents).expand(T, 4),
            torch.full((T,), 4),
            p.expand(T, 5, V),
            draft_probs=dp,
            deterministic=det,
            generator=g,
        )
        counts = torch.bincount(res.tokens[:, 0], minlength=V)
        assert _gtest(counts, p[0]) > 1e-4


def test_seeded_generator_is_bit_identical():
    trees = [
        DraftTree.chain(torch.tensor([1, 2, 3]), _dist(3, V, seed=1)),
        DraftTree(torch.tensor([1, 2, 0]), torch.tensor([-1, -1, 0]), _dist(3, V, seed=2)),
    ]
    targets = [_dist(4, V, seed=3), _dist(4, V, seed=4)]

    def run():
        g = torch.Generator().manual_seed(1234)
        return [[r.tokens.tolist() for r in rejection_sample_batch(trees, targets, generator=g)] for _ in range(30)]

    assert run() == run()


def test_batch_result_structure():
    trees = [DraftTree.chain(torch.tensor([1, 2])), DraftTree.empty(vocab_size=V)]
    res = rejection_sample_batch(trees, _dist(2, 3, V), generator=torch.Generator().manual_seed(0))
    assert all(isinstance(r, AcceptResult) for r in res)
    for r in res:
        assert r.tokens.numel() == r.num_accepted + 1 and r.path.numel() == r.num_accepted
        assert r.tokens.dtype == torch.long


# ---------------------------------------------------------------- bad input
def test_wrong_number_of_rows_is_refused():
    with pytest.raises(ValueError, match="n \\+ 1 = 3"):
        rejection_sample(DraftTree.chain(torch.tensor([1, 2])), _dist(2, V))


def test_vocab_mismatch_is_refused():
    tree = DraftTree.chain(torch.tensor([1, 2]), _dist(2, V))
    with pytest.raises(ValueError, match="V=6"):
        rejection_sample(tree, _dist(3, 6))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1])
def test_non_distribution_target_is_refused(bad):
    p = _dist(3, V)
    p[1, 2] = bad
    with pytest.raises(ValueError, match="row"):
        rejection_sample(DraftTree.chain(torch.tensor([1, 2])), p)


def test_logits_passed_as_probs_are_refused():
    with pytest.raises(ValueError, match="sums to"):
        rejection_sample(DraftTree.chain(torch.tensor([1])), torch.rand(2, V) * 3)


def test_greedy_refuses_nan():
    logits = torch.randn(2, V)
    logits[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        rejection_sample(DraftTree.chain(torch.tensor([1])), logits, rule="greedy")


def test_sampled_node_without_draft_probs_is_refused():
    tree = DraftTree(torch.tensor([1]), torch.tensor([-1]), deterministic=torch.tensor([False]), vocab_size=V)
    with pytest.raises(ValueError, match="draft_probs"):
        rejection_sample(tree, _dist(2, V))


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="rule"):
        rejection_sample(DraftTree.chain(torch.tensor([1])), _dist(2, V), rule="typical")


def test_requested_rule_must_match_tree():
    tree = DraftTree(torch.tensor([1, 2]), torch.tensor([-1, -1]), vocab_size=V)
    with pytest.raises(ValueError, match="TREE_DETERMINISTIC"):
        rejection_sample(tree, _dist(3, V), rule=Rule.CHAIN)


def test_padded_validation():
    T = torch.tensor
    with pytest.raises(ValueError, match="earlier node"):
        rejection_sample_padded(T([[1, 2]]), T([[-1, 1]]), T([2]), _dist(1, 3, V))
    with pytest.raises(ValueError, match="out of vocabulary"):
        rejection_sample_padded(T([[1, 9]]), T([[-1, 0]]), T([2]), _dist(1, 3, V))
    with pytest.raises(ValueError, match="draft_probs is None"):
        rejection_sample_padded(T([[1]]), T([[-1]]), T([1]), _dist(1, 2, V), deterministic=T([[False]]))
    with pytest.raises(ValueError, match="probability 0"):
        q = torch.zeros(1, 1, V)
        q[..., 0] = 1
        rejection_sample_padded(T([[1]]), T([[-1]]), T([1]), _dist(1, 2, V), draft_probs=q)


def test_two_level_sampler_law_and_zero_weights():
    """Large-V path of sample_rows (block CDF): right law, zero-weight entries never drawn."""
    Vb = 8192
    g = torch.Generator().manual_seed(3)
    w = torch.zeros(Vb)
    hot = torch.tensor([0, 255, 256, 4000, 8191])  # block edges included
    w[hot] = torch.tensor([0.1, 0.3, 0.2, 0.15, 0.25])
    draws = sample_rows(w.expand(50000, Vb), g)
    assert set(draws.unique().tolist()) <= set(hot.tolist())
    counts = torch.bincount(draws, minlength=Vb)[hot]
    assert _gtest(counts, w[hot]) > 1e-4


def test_list_and_padded_targets_give_identical_results():
    trees = [
        DraftTree.chain(torch.tensor([1, 2, 3]), _dist(3, V, seed=1)),
        DraftTree.chain(torch.tensor([4]), _dist(1, V, seed=2)),
    ]
    padded = _dist(2, 4, V, seed=3)
    listed = [padded[0], padded[1, :2]]
    for _ in range(5):
        a = rejection_sample_batch(trees, padded, generator=torch.Generator().manual_seed(9))
        b = rejection_sample_batch(trees, listed, generator=torch.Generator().manual_seed(9))
        assert [r.tokens.tolist() for r in a] == [r.tokens.tolist() for r in b]


def test_padding_rows_are_not_validated_or_read():
    """NaN padding rows change nothing: the same emitted tokens as clean padding, seed for seed."""
    tree = DraftTree.chain(torch.tensor([1]), _dist(1, V, seed=1))
    clean = _dist(1, 4, V, seed=2)
    padded = clean.clone()
    padded[0, 2:] = float("nan")  # rows past n + 1 = 2 are padding
    for seed in range(50):
        got, want = (rejection_sample_batch([tree], rows, generator=torch.Generator().manual_seed(seed))[0]
                     for rows in (padded, clean))
        assert got.tokens.tolist() == want.tokens.tolist() and got.path.tolist() == want.path.tolist(), seed


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_targets_sample_as_their_float32_values(dtype):
    """Low-precision target rows (the production GPU dtype) are accepted at their dtype's tolerance
    and sampled as the same values in float32: identical outputs, seed for seed, for a sampled chain,
    a deterministic chain and a sampled tree with siblings (residuals after a rejection). The float32
    copy skips validation: its rows sum to 1 only within the low-precision rounding."""
    p = _dist(4, V, seed=4).to(dtype)
    q = _dist(3, V, seed=5)
    trees = [DraftTree.chain(torch.tensor([0, 1]), q[:2]), DraftTree.chain(torch.tensor([2, 3])),
             DraftTree(torch.tensor([0, 1, 2]), torch.tensor([-1, -1, 0]), q)]
    accepted = set()
    for tree in trees:
        rows = p[: tree.num_nodes + 1]
        for seed in range(300):
            got = rejection_sample(tree, rows, generator=torch.Generator().manual_seed(seed))
            want = rejection_sample(tree, rows.float(), generator=torch.Generator().manual_seed(seed), validate=False)
            assert got.tokens.tolist() == want.tokens.tolist() and got.path.tolist() == want.path.tolist(), seed
            accepted.add((tree.num_nodes, got.num_accepted))
    assert {k for _, k in accepted} == {0, 1, 2}, accepted  # every outcome was reached


def test_mixed_batch_of_chains_and_trees_uses_tree_path_correctly():
    trees = [
        DraftTree.chain(torch.tensor([1, 2]), _dist(2, V, seed=1)),
        DraftTree(torch.tensor([3, 4, 0]), torch.tensor([-1, -1, 1]), vocab_size=V),
    ]
    p = _dist(2, 4, V, seed=2)
    p[1] = torch.nn.functional.one_hot(torch.tensor([4, 0, 0, 2]), V).float()  # forces path 1 -> 2
    res = rejection_sample_batch(trees, p, generator=torch.Generator().manual_seed(0))
    assert res[1].path.tolist() == [1, 2] and res[1].tokens.tolist() == [4, 0, 2]
    assert [r.rule for r in res] == [Rule.CHAIN, Rule.TREE_DETERMINISTIC]


# ---------------------------------------------------------------- properties
@st.composite
def _drafts(draw):
    """A random tree (parents precede children), per-node sampled / deterministic flags, rows."""
    n = draw(st.integers(0, 9))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    det = [draw(st.booleans()) for _ in range(n)]
    seed = draw(st.integers(0, 2**31 - 1))
    zero_p = draw(st.booleans())
    return parents, det, seed, zero_p


@settings(max_examples=60, deadline=None)
@given(_drafts())
def test_result_is_a_valid_path_with_one_extra_token(spec):
    parents, det, seed, zero_p = spec
    n = len(parents)
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(torch.randn(n, V, generator=g) * 2, -1)
    tokens = torch.multinomial(q, 1, generator=g).squeeze(1) if n else torch.zeros(0, dtype=torch.long)
    det_t = torch.tensor(det, dtype=torch.bool)
    q = torch.where(det_t.unsqueeze(1), torch.nn.functional.one_hot(tokens, V).float(), q)
    p = torch.softmax(torch.randn(n + 1, V, generator=g) * 2, -1)
    if zero_p:
        p[:, 0] = 0
        p = p / p.sum(-1, keepdim=True)
    tree = DraftTree(tokens, torch.tensor(parents, dtype=torch.int32), q, det_t)
    for rule in ("auto", "greedy"):
        res = rejection_sample(tree, p, generator=g, rule=rule)
        path = res.path.tolist()
        assert res.tokens.numel() == len(path) + 1
        assert res.tokens[:-1].tolist() == [int(tokens[i]) for i in path]
        assert all(parents[a] == b for a, b in zip(path, [-1] + path[:-1]))
        last_row = p[path[-1] + 1] if path else p[0]
        assert last_row[res.tokens[-1]] > 0, "emitted a token the target gives probability 0"
        if rule == "greedy":
            assert res.tokens[-1] == last_row.argmax()


def test_bit_identical_across_processes():
    """Same seed, separate interpreter: identical tokens (no hidden global RNG state is used)."""
    code = (
        "import sys, torch\n"
        "torch.manual_seed(int(sys.argv[1]))  # the global RNG state must not matter\n"
        "from specdec import DraftTree\n"
        "from specdec.sampling import rejection_sample_batch\n"
        "g = torch.Generator().manual_seed(0)\n"
        "q = torch.softmax(torch.randn(2, 3, 50, generator=g), -1)\n"
        "p = torch.softmax(torch.randn(2, 4, 50, generator=g), -1)\n"
        "trees = [DraftTree.chain(torch.tensor([1, 2, 3]), q[0]), DraftTree(torch.tensor([4, 5, 6]), "
        "torch.tensor([-1, -1, 0]), q[1])]\n"
        "g = torch.Generator().manual_seed(42)\n"
        "print([[r.tokens.tolist() for r in rejection_sample_batch(trees, p, generator=g)] for _ in range(20)])\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code, str(s)], capture_output=True, text=True, check=True).stdout
        for s in (1, 2)
    ]
    assert runs[0] == runs[1] and runs[0].strip()


@pytest.mark.cuda
def test_cuda_first_token_law():
    T = 20000
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(0)
    p = _dist(4, V, seed=8).to(dev)
    q = _dist(3, V, seed=9, scale=1.0).to(dev)
    tok = torch.multinomial(q.repeat(T, 1), 1, generator=g).view(T, 3)
    res = rejection_sample_padded(
        tok,
        torch.tensor([-1, -1, 0], device=dev).expand(T, 3),
        torch.full((T,), 3, device=dev),
        p.expand(T, 4, V),
        draft_probs=q.expand(T, 3, V),
        generator=g,
    )
    assert res.tokens.device.type == "cuda"
    counts = torch.bincount(res.tokens[:, 0], minlength=V).cpu()
    assert _gtest(counts, p[0].cpu()) > 1e-4


def test_tree_token_outside_target_vocab_is_refused():
    tree = DraftTree(torch.tensor([1, 6]), torch.tensor([-1, 0]), vocab_size=None)
    with pytest.raises(ValueError, match="out of vocabulary"):
        rejection_sample_batch([tree], [_dist(3, V)])


def test_accept_logits_routes_temperature_zero_to_greedy_and_processes_otherwise():
    from specdec.sampling.params import SamplingParams, process_logits
    from specdec.sampling.rejection import accept_logits

    logits = torch.randn(2, 4, V, generator=torch.Generator().manual_seed(0)) * 3
    trees = [DraftTree.chain(torch.tensor([1, 2, 3])), DraftTree.chain(torch.tensor([0]))]
    greedy = accept_logits(trees, logits, SamplingParams(temperature=0))
    assert [r.tokens.tolist() for r in greedy] == [r.tokens.tolist() for r in accept_logits(trees, logits, None)]
    assert all(r.rule is Rule.GREEDY for r in greedy)
    sp = SamplingParams(0.8, 3, 0.9)
    a = accept_logits(trees, logits, sp, generator=torch.Generator().manual_seed(1))
    b = rejection_sample_batch(trees, process_logits(logits, 0.8, 3, 0.9), generator=torch.Generator().manual_seed(1))
    assert [r.tokens.tolist() for r in a] == [r.tokens.tolist() for r in b]
    bad = logits.clone()
    bad[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        accept_logits(trees, bad, sp)
    with pytest.raises(TypeError, match="SamplingParams"):
        accept_logits(trees, logits, {"temperature": 1.0})


def test_chain_batches_never_enter_the_tree_loop(monkeypatch):
    """Chains take the loop-free path (all tests at once, cumprod), trees the per-test loop."""
    import specdec.sampling.rejection as sampling_mod

    class Forbidden:
        def __call__(self, *args, **kwargs):
            raise AssertionError("chain batch went through the tree loop")

    monkeypatch.setattr(sampling_mod, "TreeSpeculative", Forbidden)
    trees = [DraftTree.chain(torch.tensor([1, 2, 3]), _dist(3, V, seed=b)) for b in range(4)] + [
        DraftTree.empty(vocab_size=V)
    ]
    res = rejection_sample_batch(trees, _dist(5, 4, V, seed=9), generator=torch.Generator().manual_seed(0))
    assert len(res) == 5
    tree = DraftTree(torch.tensor([1, 2]), torch.tensor([-1, -1]), vocab_size=V)
    with pytest.raises(AssertionError, match="tree loop"):
        rejection_sample_batch([tree], _dist(1, 3, V))


def test_padded_entries_are_never_read():
    """Padding tokens/parents may hold any value (here -1 and out-of-vocabulary ids), and the padding
    node's draft row and the target rows past it anything (NaN): the results equal those with clean
    padding, seed for seed."""
    from specdec import rejection_sample_padded

    V = 5
    g = torch.Generator().manual_seed(0)
    target = torch.softmax(torch.randn(2, 3, V, generator=g), -1)
    q = torch.softmax(torch.randn(2, 2, V, generator=g), -1)
    dirty_target, dirty_q = target.clone(), q.clone()
    dirty_target[1, 2:] = float("nan")  # request 1 has one node: rows 0 and 1 are read, row 2 is padding
    dirty_q[1, 1] = float("nan")
    clean = (torch.tensor([[1, 2], [3, 0]]), torch.tensor([[-1, 0], [-1, -1]]))
    sizes = torch.tensor([2, 1])
    outcomes = set()
    for pad in (-1, V, 10 * V):
        dirty = (torch.tensor([[1, 2], [3, pad]]), torch.tensor([[-1, 0], [-1, pad]]))
        for sampled in (True, False):
            for validate in (True, False):
                for seed in range(20):
                    got, want = (
                        rejection_sample_padded(*tp, sizes, rows, draft_probs=probs if sampled else None,
                                                validate=validate, generator=torch.Generator().manual_seed(seed))
                        for tp, rows, probs in ((dirty, dirty_target, dirty_q), (clean, target, q)))
                    for field in ("tokens", "path", "num_accepted"):
                        assert torch.equal(getattr(got, field), getattr(want, field)), (pad, sampled, validate, seed)
                    outcomes.add(tuple(got.num_accepted.tolist()))
    assert len(outcomes) >= 3, outcomes  # accepted and rejected nodes in both requests


def test_greedy_refuses_a_row_with_no_allowed_token():
    from specdec import Rule

    logits = torch.zeros(2, 6)
    logits[1] = float("-inf")
    with pytest.raises(ValueError, match="-inf everywhere"):
        rejection_sample(DraftTree.chain([2]), logits, rule=Rule.GREEDY)
