"""Choosing how many draft nodes to verify: measured verify cost against expected acceptance.

Keeping the ``k`` most likely nodes of a tree (prefix-closed: path probabilities never grow along a
path) emits ``1 + sum of their path probabilities`` tokens in ``c(k)`` seconds, ``c`` the measured
:class:`~specdec.estimate.verify_cost.VerifyCostModel`; the decoder verifies the ``k`` maximising
that rate (``k = 0``: do not speculate). ``B`` rows share one forward padded to the largest tree, so
a batched step keeps one ``k`` for every row, the one maximising the batch's tokens per second under
the ``B``-row curve: where one more node per row costs more than the rows expect to gain, the step
does not speculate. docs/engine.md explains the estimates and the adaptive ask.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Hashable, Sequence


from ..tree import DraftTree
from ..estimate.calibration import RequestCalibration, RunningMean, ScoreCalibration
from ..estimate.verify_cost import VerifyCostModel
from .interface import BatchView, Decision, Outcome


@dataclass
class AcceptanceEstimator:
    """Running acceptance rates of one proposer by tree depth and sibling rank, for trees without
    estimates of their own (Medusa heads, draft models).

    ``rate(d, r)``: P(the ``r``-th child, in node order, of an accepted depth-``d - 1`` node is
    accepted). Siblings are alternatives, so one node's children share its probability. The prior is
    Beta with mean ``prior_accept / (prior_accept + prior_reject) / (1 + r)``; a depth never tried
    borrows the deepest tried depth's rate at that rank. Evidence fades by ``decay`` per :meth:`tick`,
    so a rank no longer verified regains its prior and is tried again.
    """

    prior_accept: float = 1.0
    prior_reject: float = 1.0
    decay: float = 0.998
    reached: list[list[float]] = field(default_factory=list)  # [d - 1][r]: the parent was accepted
    accepted: list[list[float]] = field(default_factory=list)

    def _prior(self, rank: int) -> float:
        return self.prior_accept / (self.prior_accept + self.prior_reject) / (1 + rank)

    def rate(self, depth: int, rank: int = 0) -> float:
        """Estimated acceptance of a depth-``depth`` node of sibling rank ``rank``."""
        strength, prior = self.prior_accept + self.prior_reject, self._prior(rank)
        for d in range(min(depth, len(self.reached)) - 1, -1, -1):  # deepest tried depth with this rank
            if rank < len(self.reached[d]):
                return (self.accepted[d][rank] + strength * prior) / (self.reached[d][rank] + strength)
        return prior

    @staticmethod
    def ranks(tree: DraftTree) -> list[int]:
        """Each node's rank among its siblings, in node order (0 = its parent's first child)."""
        out: list[int] = []
        seen: dict[int, int] = {}
        for p in tree.parent_list:
            out.append(seen.get(p, 0))
            seen[p] = out[-1] + 1
        return out

    def update(self, tree: DraftTree, path: Sequence[int] | int, ranks: Sequence[int] | None = None) -> None:
        """Record one verified tree and its accepted node ``path`` (an int ``k``: the first ``k`` nodes of
        the first-child chain). ``ranks``: each node's sibling rank in the tree as drafted, when ``tree``
        is a pruned part of it."""
        ranks = self.ranks(tree) if ranks is None else ranks
        if isinstance(path, int):
            node, chain = -1, []
            for _ in range(path):
                node = tree.children_of(node)[0]
                chain.append(node)
            path = chain
        for d in range(1, min(tree.max_depth, len(path) + 1) + 1):
            parent = path[d - 2] if d >= 2 else -1
            children = tree.children_of(parent)
            while len(self.reached) < d:
                self.reached.append([])
                self.accepted.append([])
            row_r, row_a = self.reached[d - 1], self.accepted[d - 1]
            for child in children:
                rank = ranks[child]
                while len(row_r) <= rank:
                    row_r.append(0)
                    row_a.append(0)
                row_r[rank] += 1
                row_a[rank] += int(d <= len(path) and path[d - 1] == child)

    def tick(self) -> None:
        """One decoding step passed: old evidence fades, the prior regains weight."""
        self.reached = [[x * self.decay for x in row] for row in self.reached]
        self.accepted = [[x * self.decay for x in row] for row in self.accepted]

    def path_probs(self, tree: DraftTree) -> list[float]:
        """Per-node probability of being accepted: the product of the rates along its path."""
        probs: list[float] = []
        for p, d, r in zip(tree.parent_list, tree.depth_list, self.ranks(tree)):
            probs.append((probs[p] if p >= 0 else 1.0) * self.rate(d, r))
        return probs


def top_nodes(path_probs: Sequence[float], k: int) -> list[int]:
    """Indices of the ``k`` largest path probabilities (ties: lower index first), in index order."""
    return sorted(sorted(range(len(path_probs)), key=lambda i: (-path_probs[i], i))[:k])


def prune_tree(tree: DraftTree, path_probs: Sequence[float], k: int) -> DraftTree:
    """The ``k`` most likely nodes of a deterministic tree (ties: lower index first), re-indexed; the
    kept set is closed under parents. ValueError for trees with sampled nodes (dropping sampled
    siblings would change the law they were drawn under)."""
    if k >= tree.num_nodes:
        return tree
    if not bool(tree.deterministic.all()):
        raise ValueError("prune_tree only prunes deterministic trees: sampled siblings must be kept as drawn")
    return tree.select(top_nodes(path_probs, k))


@dataclass
class DraftOverhead:
    """Seconds a decoding step spends outside the verify forward only because it drafted (reading
    ``1 + n`` logit rows, the tree walk, moving the accepted K/V rows), which the verify-cost curve
    does not see. :attr:`seconds` is the difference of two running means of single-request steps'
    accept-phase times (drafted or not), never negative, and 0 until both have ``min_samples``."""

    weight: float = 0.05
    min_samples: int = 8
    _means: list[RunningMean] = field(default_factory=lambda: [RunningMean(), RunningMean()])  # [no draft, drafted]

    def observe(self, drafted: bool, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a step cannot take {seconds} s")
        self._means[int(bool(drafted))].add(seconds, self.weight)

    @property
    def means(self) -> list[float]:
        """Mean accept-phase seconds ``[no draft, drafted]`` (0 before any)."""
        return [m.value or 0.0 for m in self._means]

    @property
    def counts(self) -> list[int]:
        """Observations ``[no draft, drafted]``."""
        return [m.n for m in self._means]

    @property
    def seconds(self) -> float:
        if min(self.counts) < self.min_samples:
            return 0.0
        return max(0.0, self.means[1] - self.means[0])


def check_draft(tree, node_probs: Sequence[float] | None, budget: int) -> None:
    """Refuse what a proposer returned when it breaks the contract: not a DraftTree, over the node
    budget, or (scored drafts) estimates that do not cover the tree or are not probabilities."""
    if not isinstance(tree, DraftTree):
        raise TypeError(f"proposer returned a {type(tree).__name__}, expected DraftTree")
    if tree.num_nodes > budget:
        raise ValueError(f"proposer returned {tree.num_nodes} nodes over the budget {budget}")
    if node_probs is None:
        return
    if len(node_probs) != tree.num_nodes:
        raise ValueError(f"proposer scored {len(node_probs)} nodes for a tree of {tree.num_nodes}")
    bad = next((p for p in node_probs if not 0.0 <= p <= 1.0), None)  # NaN fails the test too
    if bad is not None:
        raise ValueError(f"proposer scored a node {bad}: acceptance estimates must be probabilities in [0, 1]")


@dataclass
class Ticket:
    """What a sized draft needs back after its verify (:meth:`DraftSizer.observe`): the verified
    ``tree``; for scored drafts its ``raw`` estimates and their ``calibration``; for unscored ones
    each node's sibling ``ranks`` in the tree as drafted."""

    tree: DraftTree
    raw: list[float] | None = None
    calibration: ScoreCalibration | None = None
    ranks: list[int] | None = None


class DraftSizer:
    """The decoder's draft-sizing policy, a :class:`~specdec.control.interface.DraftController` in tree nodes.

    :meth:`decide` gives each request the nodes to ask of the proposer, :meth:`size` keeps the nodes
    of each draft worth their verify time, :meth:`observe` learns from the step (``Outcome.details``:
    request id -> ``(ticket, accepted path)``; ``Outcome.timings``: a single-request step's
    ``verify`` and ``accept`` seconds). It owns all it learns: an :class:`AcceptanceEstimator`, one
    :class:`ScoreCalibration` per ``ScoredDraft.source``, one :class:`RequestCalibration` per running
    request and source, the live verify-cost curve and the :class:`DraftOverhead`.

    Args:
        budget: ``"auto"`` (keep the cost-optimal nodes: needs :meth:`set_cost`) or an int (ask for
            at most that many nodes and verify them all).
        max_budget: most nodes asked of the proposer per request and step.
        calibration: factory of the per-source calibrations.
        per_request: give each request its own calibration, shrunk toward its source's.
        adapt: learn while decoding (False freezes every estimate, so runs size drafts identically).
        adaptive_ask: with ``"auto"`` and ``adapt``, ask about twice the most nodes a request recently
            kept (:meth:`ask_for`): a model proposer's drafting cost grows with what it is asked.
    """

    unit = "nodes"
    ASK_FLOOR = 8  # never ask for fewer (an EAGLE tree's width is min(top_k, budget))
    ASK_DECAY = 0.9  # per-step fade of the remembered most-kept size
    ASK_EXPLORE = 16  # every this-many-th step of a request asks the full budget

    def __init__(
        self,
        budget: str | int = "auto",
        max_budget: int = 64,
        *,
        calibration: Callable[[], ScoreCalibration] = ScoreCalibration,
        per_request: bool = True,
        adapt: bool = True,
        adaptive_ask: bool = True,
    ):
        if isinstance(max_budget, bool) or not isinstance(max_budget, int) or max_budget < 0:
            raise ValueError(f"max_budget must be an int >= 0, got {max_budget!r}")
        if budget != "auto" and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise ValueError(f"budget must be 'auto' or an int >= 0, got {budget!r}")
        self.budget, self.max_budget = budget, max_budget
        self.make_calibration, self.per_request, self.adapt = calibration, per_request, bool(adapt)
        self.adaptive_ask = bool(adaptive_ask)
        self._kept: dict[Hashable, tuple[float, int]] = {}  # req_id -> (decayed most kept, steps sized)
        self.live_costs: dict[int, VerifyCostModel] = {}  # batch size -> the live curve of that many rows
        self.estimator = AcceptanceEstimator()
        self.draft_overhead = DraftOverhead()
        self.calibrations: dict[str, ScoreCalibration] = {}
        self._requests: dict[tuple[Hashable, str], RequestCalibration] = {}

    @property
    def auto(self) -> bool:
        return self.budget == "auto"

    @property
    def ask(self) -> int:
        """Nodes to ask of the proposer. A fixed budget caps what is drafted, since sampled trees cannot be
        pruned afterwards."""
        return self.max_budget if self.auto else min(self.max_budget, self.budget)

    def ask_for(self, req_id: Hashable) -> int:
        """Nodes to ask for one request: :attr:`ask`, or with the adaptive ask ``clamp(2 * recently most
        kept, ASK_FLOOR, ask)``; a request's first step and every ``ASK_EXPLORE``-th ask :attr:`ask`."""
        state = self._kept.get(req_id) if self.auto and self.adapt and self.adaptive_ask else None
        if state is None or state[1] % self.ASK_EXPLORE == 0:
            return self.ask
        return min(self.ask, max(self.ASK_FLOOR, math.ceil(2 * state[0])))

    def decide(self, batch: BatchView) -> Decision:
        """Nodes to ask of the proposer for each of ``batch.req_ids`` (:meth:`ask_for`), at most ``batch.cap``."""
        cap = self.ask if batch.cap is None else min(self.ask, batch.cap)
        asks = tuple(min(self.ask_for(r), cap) for r in batch.req_ids)
        return Decision(max(asks, default=0), per_request=asks, reason="adaptive ask" if self.adaptive_ask else "ask")

    def reset(self) -> None:
        """Forget what was learnt (estimates, calibrations, asks); the live cost curve restarts from nothing."""
        self.__init__(self.budget, self.max_budget, calibration=self.make_calibration, per_request=self.per_request,
                      adapt=self.adapt, adaptive_ask=self.adaptive_ask)

    def set_cost(self, cost: VerifyCostModel) -> None:
        """Start the live curve of ``cost.batch`` rows from ``cost`` (copied: the caller's model is never modified)."""
        self.live_costs[cost.batch] = replace(cost, seconds=list(cost.seconds))

    @property
    def live_cost(self) -> VerifyCostModel | None:
        """The live one-row curve (None before :meth:`set_cost`)."""
        return self.live_costs.get(1)

    def cost_for(self, batch: int) -> VerifyCostModel:
        """The curve for a step of ``batch`` rows: the live curve of the fewest rows >= ``batch`` (more
        rows make a node relatively dearer, so a larger batch's curve errs toward not drafting), else
        one estimated from the one-row curve (:meth:`VerifyCostModel.for_batch`), kept live from then on."""
        fits = [b for b in self.live_costs if b >= batch]
        if fits:
            return self.live_costs[min(fits)]
        if self.live_cost is None:
            raise ValueError("DraftSizer(budget='auto') needs a verify-cost curve: call set_cost() first")
        self.live_costs[batch] = self.live_cost.for_batch(batch)
        return self.live_costs[batch]

    def size(
        self, req_id: Hashable, tree: DraftTree, node_probs: Sequence[float] | None = None, source: str = ""
    ) -> tuple[DraftTree, Ticket | None]:
        """``(tree to verify, ticket for observe)`` for one request's draft verified alone; scored drafts
        pass ``node_probs`` and ``source``. An empty draft has no ticket."""
        return self.size_step([(req_id, tree, node_probs, source)])[0]

    def size_step(
        self, drafts: Sequence[tuple[Hashable, DraftTree, Sequence[float] | None, str]]
    ) -> list[tuple[DraftTree, Ticket | None]]:
        """Size the drafts ``(req_id, tree, node_probs or None, source)`` of one step, verified together:
        each row keeps its most likely nodes, up to the one count :meth:`VerifyCostModel.best_shared_size`
        picks for all of them under the curve of this many rows (:meth:`cost_for`), the measured drafting
        overhead counted once per row. Trees with sampled nodes are kept whole."""
        if self.auto and drafts and self.live_cost is None:
            raise ValueError("DraftSizer(budget='auto') needs a verify-cost curve: call set_cost() first")
        rows = [self._estimates(req_id, tree, probs, source) if tree.num_nodes else None
                for req_id, tree, probs, source in drafts]
        k = None
        if self.auto:
            cost = self.cost_for(len(drafts))
            k = cost.best_shared_size([r[0] for r in rows if r is not None], self.draft_overhead.seconds * len(drafts))
        out = []
        for (req_id, tree, _, _), row in zip(drafts, rows):
            sized, ticket = tree, None
            if row is not None:
                keep = None
                if k is not None and k < tree.num_nodes and bool(tree.deterministic.all()):
                    keep = top_nodes(row[0], k)
                    sized = tree.select(keep)
                ticket = row[1](sized, keep)
            if self.auto and self.adapt and self.adaptive_ask:
                most, steps = self._kept.get(req_id, (0.0, 0))
                self._kept[req_id] = (max(float(sized.num_nodes), self.ASK_DECAY * most), steps + 1)
            out.append((sized, ticket))
        return out

    def _estimates(self, req_id, tree, node_probs, source) -> tuple[list[float], Callable]:
        """``(acceptance estimate of each node, ticket(kept tree, kept indices or None))`` of one draft:
        the proposer's calibrated scores, or its running acceptance by depth and rank."""
        if node_probs is None:
            ranks = self.estimator.ranks(tree)
            return self.estimator.path_probs(tree), lambda t, keep: Ticket(
                t, ranks=ranks if keep is None else [ranks[i] for i in keep])
        cal = self._calibration(req_id, source)
        raw = [float(p) for p in node_probs]
        return cal.apply(raw, tree.depth_list), lambda t, keep: Ticket(
            t, raw if keep is None else [raw[i] for i in keep], cal)

    def observe(self, outcome: Outcome) -> None:
        """Learn from one step: each request's verified draft (``outcome.details``), then :meth:`tick`,
        then with ``outcome.timings`` its verify time (the live curve of that many rows, at its largest
        tree) and, for a single-request step, its accept time (the drafting overhead)."""
        if not self.adapt:
            return
        for ticket, path in outcome.details.values():
            self.learn(ticket, path)
        self.tick()
        if not outcome.timings or not outcome.drafted.size:
            return
        rows, nodes = int(outcome.drafted.size), int(outcome.drafted.max())
        if rows == 1:
            self.observe_step(nodes, outcome.timings["verify"], outcome.timings["accept"])
        elif rows in self.live_costs:
            self.live_costs[rows].observe(nodes, outcome.timings["verify"])

    def learn(self, ticket: Ticket | None, path: Sequence[int] | int) -> None:
        """Learn from one verified draft: its accepted node ``path`` (or, for a chain, its length)."""
        if ticket is None or not self.adapt:
            return
        self.estimator.update(ticket.tree, path, ticket.ranks)
        if ticket.calibration is not None:
            accepted = path if isinstance(path, int) else len(path)
            ticket.calibration.update(ticket.raw, ticket.tree.depth_list, accepted)

    def tick(self) -> None:
        """One decoding step passed (drafted or not): old estimator and calibration evidence fades."""
        if not self.adapt:
            return
        self.estimator.tick()
        for cal in itertools.chain(self.calibrations.values(), self._requests.values()):
            cal.tick()

    def observe_step(self, nodes: int, verify_s: float, accept_s: float) -> None:
        """A single-request step's verify time refines the live cost curve, its accept time the drafting
        overhead (a batched step's times say nothing about one tree)."""
        if self.live_cost is None or not self.adapt:
            return
        self.live_cost.observe(nodes, verify_s)
        self.draft_overhead.observe(nodes > 0, accept_s)

    def end(self, req_id: Hashable) -> None:
        """Forget a finished request's own calibrations (its evidence stays in the shared ones)."""
        for key in [k for k in self._requests if k[0] == req_id]:
            del self._requests[key]
        self._kept.pop(req_id, None)

    def _calibration(self, req_id: Hashable, source: str) -> ScoreCalibration:
        shared = self.calibrations.get(source)
        if shared is None:
            shared = self.calibrations[source] = self.make_calibration()
        if not self.per_request:
            return shared
        own = self._requests.get((req_id, source))
        if own is None:
            own = self._requests[(req_id, source)] = RequestCalibration(shared=shared)
        return own
