"""Draft sizing for trees without estimates (Medusa-style static trees): siblings are alternatives, so
the sizer's estimate must not count them all, and its automatic budget must do at least as well as
the best fixed budget on a replay where the truth is known."""

import pytest
import torch

from specdec import DraftTree
from specdec.control.sizer import AcceptanceEstimator, DraftSizer
from specdec.estimate.verify_cost import VerifyCostModel
from specdec.proposers.heads import static_tree

# P(level d's r-th candidate is the target's token), mutually exclusive per level: a Medusa-like
# proposer with a sharp first guess and a long tail.
RANK_ACC = [[0.55, 0.12, 0.06, 0.03, 0.02, 0.01], [0.4, 0.1, 0.05, 0.02, 0.01, 0.01],
            [0.3, 0.08, 0.04, 0.02, 0.01, 0.01], [0.22, 0.06, 0.03, 0.01, 0.01, 0.01]]
# A CPU-like verify cost (SmolLM2 on 2 cores: a 64-node verify ~2.5x a 1-token step), seconds.
COST = VerifyCostModel([0, 1, 2, 4, 8, 16, 32, 64], [0.022, 0.0243, 0.025, 0.0256, 0.0275, 0.031, 0.040, 0.056])


def _tree(budget: int) -> DraftTree:
    paths = static_tree(RANK_ACC, budget)
    index = {p: i for i, p in enumerate(paths)}
    parents = [index[p[:-1]] if len(p) > 1 else -1 for p in paths]
    return DraftTree(torch.tensor([p[-1] for p in paths]), torch.tensor(parents, dtype=torch.int32))


def _accepted_path(tree: DraftTree, gen: torch.Generator) -> list[int]:
    """The true process: at each level the target's token is candidate r with RANK_ACC[d][r]."""
    path, node = [], -1
    for d, probs in enumerate(RANK_ACC):
        u, rank, acc = float(torch.rand((), generator=gen)), None, 0.0
        for r, p in enumerate(probs):
            acc += p
            if u < acc:
                rank = r
                break
        child = (
            next((c for c in tree.children_of(node) if int(tree.tokens[c]) == rank), None) if rank is not None else None
        )
        if child is None:
            return path
        path.append(child)
        node = child
    return path


def _replay(policy, steps: int = 4000, seed: int = 0) -> tuple[float, float]:
    """(tokens per second of model time, mean verified nodes) of one sizing policy."""
    gen = torch.Generator().manual_seed(seed)
    tokens = seconds = nodes = 0.0
    for _ in range(steps):
        tree, observe = policy()
        path = _accepted_path(tree, gen)
        observe(path)
        tokens += len(path) + 1
        seconds += COST.cost(tree.num_nodes)
        nodes += tree.num_nodes
    return tokens / seconds, nodes / steps


def _auto(estimator=None):
    sizer = DraftSizer("auto", 64)
    sizer.set_cost(COST)
    if estimator is not None:
        sizer.estimator = estimator
    full = _tree(64)

    def step():
        tree, ticket = sizer.size(0, full)
        return tree, lambda path: (sizer.learn(ticket, path), sizer.tick())

    return step


def _fixed(k: int):
    tree = _tree(k)
    return lambda: (tree, lambda path: None)


class _PerDepthOnly(AcceptanceEstimator):
    """The old estimate: every sibling at a depth gets that depth's acceptance rate."""

    def rate(self, depth, rank=0):
        d = min(depth, len(self.reached)) - 1
        if d < 0:
            return 0.5
        reached = max(self.reached[d], default=0)  # every step whose parent was accepted reaches rank 0
        return (sum(self.accepted[d]) + 1) / (reached + 2)


def test_auto_budget_is_at_least_as_fast_as_the_best_fixed_budget():
    """Within 2% of the best fixed budget, whose tree is built from the true rank accuracies the
    sizer has to learn (from a flat prior, in the same 4000 steps)."""
    fixed = {k: _replay(_fixed(k))[0] for k in (1, 2, 4, 8, 16, 32, 64)}
    best = max(fixed.values())
    auto, nodes = _replay(_auto())
    assert auto >= 0.98 * best, (auto, fixed)
    assert nodes < 20  # it verifies the few nodes that pay, not the whole 64-node tree


def test_sibling_blind_estimates_overspend():
    auto, nodes = _replay(_auto())
    blind, blind_nodes = _replay(_auto(_PerDepthOnly()))
    assert blind_nodes > 2 * nodes and blind < auto  # the old estimate verified most of the tree, slower


def test_rank_rates_of_one_node_sum_to_at_most_one_after_learning():
    sizer = DraftSizer("auto", 64)
    sizer.set_cost(COST)
    _replay(lambda: (lambda t: (t, lambda path: sizer.estimator.update(t, path)))(_tree(64)), steps=2000)
    est = sizer.estimator
    for d in range(1, len(RANK_ACC) + 1):
        rates = [est.rate(d, r) for r in range(len(RANK_ACC[d - 1]))]
        assert sum(rates) <= 1.0 and rates == sorted(rates, reverse=True)
        assert abs(rates[0] - RANK_ACC[d - 1][0]) < 0.06  # the first guess's rate is learned
    probs = est.path_probs(_tree(64))
    assert sum(probs) < 3  # expected accepted tokens of the whole tree, not the 17.75 a per-depth sum gave


def test_auto_budget_for_chains_matches_the_best_fixed_length():
    """A draft-model-like chain proposer: each next token is accepted with 0.7 given its parent."""

    def chain(k):
        return DraftTree.chain(torch.zeros(k, dtype=torch.long))

    def accepted(tree, gen):
        n = 0
        while n < tree.num_nodes and float(torch.rand((), generator=gen)) < 0.7:
            n += 1
        return list(range(n))

    def replay(policy, steps=4000):
        gen, tokens, seconds = torch.Generator().manual_seed(1), 0.0, 0.0
        for _ in range(steps):
            tree, observe = policy()
            path = accepted(tree, gen)
            observe(path)
            tokens, seconds = tokens + len(path) + 1, seconds + COST.cost(tree.num_nodes)
        return tokens / seconds

    sizer = DraftSizer("auto", 32)
    sizer.set_cost(COST)

    def auto():
        tree, ticket = sizer.size(0, chain(32))
        return tree, lambda path: (sizer.learn(ticket, path), sizer.tick())

    best = max(replay(lambda k=k: (chain(k), lambda path: None)) for k in (1, 2, 4, 8, 16, 32))
    assert replay(auto) >= 0.98 * best


def _chain(n: int) -> DraftTree:
    return DraftTree(torch.arange(n), torch.arange(-1, n - 1, dtype=torch.int32))


def test_adaptive_ask_follows_what_the_sizer_keeps():
    """A request is asked for about twice its recent most-kept nodes (never under the floor), grows
    back to the full budget when it keeps all it was given, and starts over after ``end``."""
    sizer = DraftSizer("auto", 32)
    sizer.set_cost(COST)
    assert sizer.ask_for("r") == 32  # nothing known yet
    kept, _ = sizer.size("r", _chain(32), [0.02] * 32, "s")  # nothing here pays for its verify time
    assert kept.num_nodes == 0 and sizer.ask_for("r") == DraftSizer.ASK_FLOOR
    asks = []
    for _ in range(3):  # sure drafts: every node is kept, so the ask was binding and doubles
        n = sizer.ask_for("r")
        kept, _ = sizer.size("r", _chain(n), [0.99] * n, "s")
        assert kept.num_nodes == n
        asks.append(sizer.ask_for("r"))
    assert asks == [16, 32, 32]
    sizer.size("r", _chain(4), [0.02] * 4, "s")  # a miss: the remembered size fades, it does not drop
    assert sizer.ask_for("r") == 32  # 2 * 0.9 * 32 nodes, capped at the budget
    for _ in range(40):
        sizer.size("r", DraftTree.empty(), [], "s")
    asks = []
    for _ in range(DraftSizer.ASK_EXPLORE):
        asks.append(sizer.ask_for("r"))
        sizer.size("r", DraftTree.empty(), [], "s")
    # the floor, except one step in ASK_EXPLORE that asks the full budget again
    assert sorted(asks) == [DraftSizer.ASK_FLOOR] * (DraftSizer.ASK_EXPLORE - 1) + [32]
    assert sizer.ask_for("other") == 32
    sizer.end("r")
    assert sizer.ask_for("r") == 32


def test_fixed_ask_when_adaptive_ask_is_off_frozen_or_budget_fixed():
    for sizer in (DraftSizer("auto", 32, adaptive_ask=False), DraftSizer("auto", 32, adapt=False), DraftSizer(6, 32)):
        sizer.set_cost(COST)
        for _ in range(3):
            sizer.size("r", _chain(sizer.ask), [0.02] * sizer.ask, "s")
        assert sizer.ask_for("r") == sizer.ask


def test_a_batched_step_keeps_one_node_count_for_every_row():
    """Four rows share a forward: each keeps its own most likely nodes, up to the one count that pays
    under the four-row curve; where the rows' gains do not cover a node per row, none drafts, even a
    row whose draft would pay alone."""
    sizer = DraftSizer("auto", 32, adapt=False)
    sizer.set_cost(COST)
    sizer.set_cost(VerifyCostModel([0, 1, 2, 4, 8], [0.030, 0.036, 0.042, 0.054, 0.08], batch=4))
    weak = [("a", _chain(4), [0.3, 0.1, 0.05, 0.02], "s")] + [(r, _chain(4), [0.02] * 4, "s") for r in "bcd"]
    assert sizer.size("a", _chain(4), [0.3, 0.1, 0.05, 0.02], "s")[0].num_nodes > 0  # alone it pays
    assert [t.num_nodes for t, _ in sizer.size_step(weak)] == [0, 0, 0, 0]
    sure = [(r, _chain(4), [0.97, 0.95, 0.9, 0.2], "s") for r in "abc"] + [("d", _chain(1), [0.9], "s")]
    sized = sizer.size_step(sure)
    assert [t.num_nodes for t, _ in sized] == [3, 3, 3, 1]  # one k for all; a shorter draft keeps all it has
    assert all(ticket is not None and ticket.tree is t for t, ticket in sized)


def test_a_batch_without_its_own_curve_uses_a_larger_batch_or_one_estimated_from_one_row():
    sizer = DraftSizer("auto", 32)
    sizer.set_cost(COST)
    eight = VerifyCostModel([0, 1, 2], [0.05, 0.09, 0.12], batch=8)
    sizer.set_cost(eight)
    assert sizer.cost_for(1) is sizer.live_cost and sizer.cost_for(5) is sizer.live_costs[8]
    assert sizer.cost_for(8).seconds == eight.seconds and sizer.cost_for(8) is not eight  # a live copy
    sixteen = sizer.cost_for(16)
    assert sixteen.batch == 16 and sixteen.cost(0) == pytest.approx(COST.cost(15))
    with pytest.raises(ValueError, match="needs a verify-cost curve"):
        DraftSizer("auto", 32).size_step([("r", _chain(2), [0.5, 0.5], "s")])
