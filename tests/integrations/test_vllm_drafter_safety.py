"""The vLLM drafter's tenancy, robustness and cost-gate accounting, against vLLM 0.32's contract.

Each test here failed on the drafter before the fix it names: a prompt-embeds request drafting
from the last user's row, a conversation's next turn indexed into the global cache as a
response, an idle gap fitted as one decode step, unverified drafts counted as rejected, the cost
gate overriding the load gate's probe, a negative fitted intercept, a warm-up that never ends
under steady arrivals, a bad row that raised out of ``propose``, and parked requests that never
expired by bytes or time.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from specdec import SuffixProposer
from specdec.proposers.suffix_options import SuffixGlobalCache
from specdec.integrations.rows import NEW, RESUMED
from specdec.integrations.vllm.drafter import PROMPT_EMBEDS_REFUSED, SuffixDrafter
from specdec.integrations.vllm.gate import GatedDrafting
from specdec.control.interface import BatchView, Outcome
from specdec.control.cost_gate import CostGate

from vllm_fake import FakeEngine

VOCAB = 50


def _config(k=3, max_len=400, **model):
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                           model_config=SimpleNamespace(get_vocab_size=lambda: VOCAB, max_model_len=max_len, **model))


class _Global(SuffixDrafter):
    OPTIONS = {"use_global": True, "global_cache_bytes": 1 << 22, "park_steps": 2, "log_every": 0}


class _GlobalPython(_Global):
    OPTIONS = dict(_Global.OPTIONS, proposer="suffix-python")


class _CostGated(SuffixDrafter):
    OPTIONS = {"cost_gate": True, "log_every": 0}


# ---------------------------------------------------------------------------- tenancy
def test_prompt_embeds_engines_are_refused_before_anything_is_built():
    """vLLM leaves an embeddings-only request's row holding the last user's tokens: refuse to start."""
    with pytest.raises(ValueError, match="enable_prompt_embeds") as err:
        SuffixDrafter(_config(enable_prompt_embeds=True))
    assert str(err.value) == PROMPT_EMBEDS_REFUSED
    assert SuffixDrafter(_config(enable_prompt_embeds=False)).k == 3


@pytest.mark.parametrize("drafter_cls", [_Global, _GlobalPython])
def test_the_global_cache_indexes_only_what_the_engine_generated(drafter_cls):
    """A conversation's next turn (the last request's prompt and response, then a new user turn) is a
    new request: every document in the global cache is a run of one request's generated tokens,
    never a span that runs into a later turn's prompt."""
    drafter = drafter_cls(_config())
    engine = FakeEngine(seed=4, p_continue=0.6, p_preempt=0.02)
    for _ in range(500):
        engine.step(drafter)
    assert engine.continued > 20
    generated = [tuple(r.tokens[r.prompt_len:]) for r in engine.finished + engine.rows + engine.waiting]
    docs = [tuple(d.tolist()) for d in drafter.proposer.global_documents()]  # the row paths' default tenant
    assert len(docs) > 50
    def inside(doc, gen):
        return any(gen[i: i + len(doc)] == doc for i in range(len(gen) - len(doc) + 1))

    strays = [d for d in docs if not any(inside(d, g) for g in generated)]
    assert not strays, f"{len(strays)} of {len(docs)} documents are not a generated span, e.g. {strays[0]}"


def test_a_next_turn_is_a_new_request_and_a_resumed_drafts_count_as_unverified():
    """Tracker level: the row that holds a finished request's tokens plus a new turn is new (its prompt
    is everything before this step's sample); a request back from preemption reports no drafted tokens
    (vLLM cleared them), so they are never counted as rejected."""
    batch = SuffixProposer(VOCAB, cache=SuffixGlobalCache(use_global=False)).row_batch(tree_budget=3)
    tok = np.zeros((2, 32), np.int32)
    first = [1, 2, 3, 4, 1, 2, 3]
    tok[0, :7] = first
    batch.step(tok, np.array([7], np.int32), np.array([1], np.int32), 3)  # request A, drafts a chain
    ids = batch.events()[0]
    tok[0, 7:12] = [9, 8, 7, 6, 5]  # A finished; B = A's tokens + a 4-token turn + 1 sampled token
    batch.step(tok, np.array([12], np.int32), np.array([1], np.int32), 3)
    ids2, kinds, prompt_end = batch.events()[:3]
    assert kinds[0] == NEW and ids2[0] != ids[0] and prompt_end[0] == 11
    # B leaves the batch (preempted) and comes back with one more token
    batch.step(tok[1:], np.array([3], np.int32), np.array([0], np.int32), 3)
    tok[0, 12] = 4
    batch.step(tok, np.array([13], np.int32), np.array([1], np.int32), 3)
    ids3, kinds, _, _, _, drafted, accepted = batch.events()
    assert ids3[0] == ids2[0] and kinds[0] == RESUMED and drafted[0] == 0 and accepted[0] == 0


def test_parked_requests_are_ended_by_tokens_and_by_time():
    tracker = __import__("specdec._ext", fromlist=["load"]).load().RowTracker(
        VOCAB, park_steps=1000, max_parked=1000, max_parked_tokens=25, park_seconds=30.0)
    tok = np.arange(40, dtype=np.int32).reshape(4, 10) % VOCAB
    tracker.step(tok, np.full(4, 10, np.int32), np.zeros(4, np.int32), now=0.0)
    assert tracker.tracked == 4
    tracker.step(tok[:1], np.full(1, 10, np.int32), np.zeros(1, np.int32), now=1.0)  # three leave: 30 tokens
    assert tracker.parked_tokens <= 25 and len(tracker.ended()) == 1  # the oldest goes first
    tracker.step(tok[:1], np.full(1, 10, np.int32), np.zeros(1, np.int32), now=2.0)
    assert tracker.parked == 2
    tracker.step(tok[:1], np.full(1, 10, np.int32), np.zeros(1, np.int32), now=31.5)  # an idle half minute
    assert tracker.parked == 0 and len(tracker.ended()) == 2


# ---------------------------------------------------------------------------- the cost gate
class GapEngine:
    """8 rows, 38 ms plain steps; drafts cheap (they pay) or costly (a tax). Returns per-step budgets."""

    def __init__(self, costly: bool, seed=0):
        self.a, self.b = 0.030, 0.001
        self.d, self.c = (0.02, 0.01) if costly else (0.0005, 0.0002)
        self.q = 0.3 if costly else 0.7
        self.rng = np.random.default_rng(seed)

    def run(self, gate, steps, gap_at=None, gap=0.0):
        budgets = []
        for t in range(steps):
            j = gate.decide(BatchView(8)).budget
            drafted = np.full(8, j)
            accepted = np.minimum((self.rng.random((8, max(j, 1))) < self.q).cumprod(1).sum(1), drafted)
            sec = self.a + self.b * 8 + (j > 0) * (self.d + self.c * drafted.sum())
            sec *= 1 + 0.03 * self.rng.standard_normal()
            if t == gap_at:
                sec += gap  # a pause, seen as one long step of rows that continue
            gate.observe(Outcome.of(drafted, accepted, budget=j, seconds=sec))
            budgets.append(j)
        return np.array(budgets)


@pytest.mark.parametrize("costly", [False, True])
@pytest.mark.parametrize("gap", [10.0, 60.0])
def test_an_idle_gap_is_not_fitted_as_a_step(costly, gap):
    """Before: a 60 s gap took drafting from 99% of steps to ~1% for 800+ steps where drafts are cheap,
    and from ~0% to 98% where they are costly; a 10 s gap moved it too."""
    gate = CostGate(4)
    engine = GapEngine(costly)
    engine.run(gate, 1500)
    before = (engine.run(gate, 800) > 0).mean()
    after = (engine.run(gate, 800, gap_at=0, gap=gap) > 0).mean()
    assert (before > 0.9) if not costly else (before < 0.1), before
    assert abs(after - before) < 0.05, (before, after, gate.coefficients())
    assert gate.outliers == 1


def test_a_slower_engine_is_followed_after_max_outliers_steps():
    """Outliers are set aside only a few in a row: an engine that really became 20x slower is refitted."""
    gate = CostGate(4, max_outliers=8)
    GapEngine(costly=False).run(gate, 800)
    slow = GapEngine(costly=False)
    slow.a, slow.b = 0.6, 0.02
    slow.run(gate, 1500)
    a, b, _, _ = gate.coefficients()
    assert a + 8 * b == pytest.approx(0.6 + 8 * 0.02, rel=0.15) and gate.outliers <= 8


def test_only_rows_offered_a_draft_count_for_depth_acceptance():
    """New and prefilling rows could not draft: counting them halved f (how deep chains reach)."""
    gate = CostGate(4)
    offered = np.array([True] * 4 + [False] * 4)
    for _ in range(200):
        gate.observe(Outcome.of([3] * 4 + [0] * 4, [2] * 4 + [0] * 4, budget=3, seconds=0.05, offered=offered))
    f, q = gate.depth_acceptance()
    assert f[:3] == pytest.approx(1.0, abs=0.02) and q[:2] == pytest.approx(1.0, abs=0.02) and q[2] < 0.05


def test_the_fit_never_goes_negative_and_rates_stay_finite():
    """Steps that fall with rows at small batches (noise, a warm cache) fitted a < 0 and rates near
    1e9 tok/s; every weight is now >= 0 and the predicted plain step stays positive."""
    rng = np.random.default_rng(1)
    gate = CostGate(4, min_fitted=8)
    for i in range(300):
        rows = int(rng.integers(1, 4))
        j = 0 if i % 3 else 2
        sec = max(1e-4, 0.012 * rows - 0.009 + 0.002 * (j > 0) + rng.normal(0, 0.001))
        gate.observe(Outcome.of(np.full(rows, j), np.zeros(rows, np.int64), budget=j, seconds=sec))
    theta = gate.coefficients()
    assert theta is not None and (theta >= 0).all()
    rates = gate.rates(1)
    assert np.isfinite(rates).all() and rates.max() < 1e4 and gate._floor(1, 2) < 1.0


def test_the_cost_gate_stays_within_the_load_gates_probe_budget():
    """With both gates on, a load gate probing at budget 1 (acceptance collapsed) caps the cost gate."""
    g = GatedDrafting(4, off_above=float("inf"), on_below=None, min_accept_rate=0.5, log_every=0, cost_gate=True)
    for _ in range(80):
        g.observe(np.full(4, 4), np.zeros(4, np.int64), fit=False)  # nothing accepted
    budgets = [g.decide(4, 100.0).budget for _ in range(200)]
    assert max(budgets) == 1 and 0 < sum(budgets) < 200


class _TimedEngine(FakeEngine):
    """Steps cost 20 ms + 2 ms a row + 1 ms a prefilled token, + (2 ms + 0.1 ms a drafted token)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.now = 0.0

    def _execute(self):
        drafted = sum(len(r.draft[: self.k]) for r in self.rows if r.prefill_chunks <= 1)
        prefill = sum(len(r.tokens) for r in self.rows if r.prefill_chunks > 0)
        self.now += 0.02 + 0.002 * len(self.rows) + 0.001 * prefill + (drafted > 0) * (0.002 + 0.0001 * drafted)
        return super()._execute()


def test_warm_up_ends_when_a_request_arrives_every_step():
    """Short requests in a full batch: nearly every step has a new or prefilling row, which the old
    gate never fitted, so it never left warm-up."""
    engine = _TimedEngine(seed=2, max_rows=8, max_new=4, p_preempt=0.0)
    d = _CostGated(_config())
    d.gating.clock = lambda: engine.now
    for _ in range(400):
        engine.step(d)
    assert d.gating.cost.coefficients() is not None and "warming up" not in d.gating.cost.last_reason


def test_a_paused_engine_does_not_derail_the_drafter():
    """vLLM's pause_generation(mode="keep"): the rows continue after a minute; drafting share holds."""
    engine = _TimedEngine(seed=3, max_rows=6, p_preempt=0.0)
    d = _CostGated(_config())
    d.gating.clock = lambda: engine.now
    for _ in range(600):
        engine.step(d)
    s = d.stats
    before = s.steps_drafting
    for _ in range(300):
        engine.step(d)
    share = (s.steps_drafting - before) / 300
    engine.now += 60.0
    before = s.steps_drafting
    for _ in range(300):
        engine.step(d)
    assert (s.steps_drafting - before) / 300 == pytest.approx(share, abs=0.1) and share > 0.5
