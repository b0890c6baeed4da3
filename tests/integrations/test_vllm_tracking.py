"""Request tracking from engine rows, against a fake that replays vLLM's custom_class call contract.

No vLLM needed: tests/integrations/vllm_fake.py reproduces what vLLM 0.32's runner does to its persistent batch
(freed rows filled first, condense, swaps, preemption and return, chunked prefill, drafter calls
skipped near max_model_len, a conversation's next turn).
"""

from types import SimpleNamespace

import numpy as np
import pytest

from specdec import SuffixProposer
from specdec.proposers.suffix_options import SuffixGlobalCache
from specdec.integrations.rows import RowSession
from specdec.integrations.vllm import LOGGER_NAME
from specdec.integrations.vllm.drafter import SuffixDrafter
from specdec.proposers.suffix_rows import RowTracking

from vllm_fake import FakeEngine

VOCAB = 50


class Recording:
    """A Proposer that records begin/commit/end and drafts nothing (tracking under test, not drafting)."""

    requires_target_hidden = False
    vocab_size = VOCAB

    def __init__(self):
        self.tokens: dict[int, list[int]] = {}
        self.prompt_len: dict[int, int] = {}
        self.ended: dict[int, list[int]] = {}

    def begin(self, rid, prompt):
        assert rid not in self.tokens and rid not in self.ended, "begun twice"
        self.tokens[rid] = list(prompt)
        self.prompt_len[rid] = len(prompt)

    def commit(self, rid, ids):
        assert ids, "empty commit"
        self.tokens[rid].extend(ids)

    def end(self, rid):
        self.ended[rid] = self.tokens.pop(rid)

    def propose(self, req_ids, budget):
        from specdec import DraftTree
        import torch

        return [DraftTree.chain(torch.empty(0, dtype=torch.long)) for _ in req_ids]


class SessionDrafter:
    """RowSession behind vLLM's propose() signature, exposing the row -> id map of each step."""

    def __init__(self, proposer, k=3, max_len=400, **kw):
        self.session = RowSession(proposer, **kw)
        self.k, self.max_len, self.longest = k, max_len, 0
        self.ids = []

    def propose(self, sampled, num_tokens, token_ids, slot_mappings=None):
        n = np.fromiter((len(s) for s in sampled), np.int32, len(sampled))
        unseen = self.k + 1 if self.longest + 2 * self.k + 1 > self.max_len else 0  # as SuffixDrafter
        self.longest = int(num_tokens[: len(sampled)].max()) if len(sampled) else 0
        step = self.session.step(token_ids, num_tokens, n, self.k, max_unseen=unseen)
        self.ids = self.session.events()[0].tolist()
        return step.chains


@pytest.mark.parametrize("seed", range(6))
def test_proposer_sees_exactly_the_committed_tokens(seed):
    """Identical-content requests, next turns and calls skipped near max_model_len included."""
    rec = Recording()
    drafter = SessionDrafter(rec, max_len=80, tracking=RowTracking(park_steps=4, max_parked=8))
    engine = FakeEngine(seed=seed, p_preempt=0.08, max_len=80, duplicate_prompts=True, p_continue=0.3)
    owner: dict[int, int] = {}  # engine request id -> tracker id (while it keeps one)
    seen: dict[int, list[int]] = {}  # engine request id -> its tokens at the last drafter call that saw it
    skipped = 0
    for _ in range(400):
        _, chains = engine.step(drafter)
        if chains is None:
            continue
        streak, skipped = engine.skipped - skipped, engine.skipped
        for req, tid in zip(engine.truth(), drafter.ids):
            assert rec.tokens[tid] == req.tokens, "the proposer's tokens differ from the engine's"
            # a request's tokens past its prompt are tokens the engine generated, never a next turn's prompt
            assert rec.prompt_len[tid] >= req.prompt_len
            if owner.get(req.rid) not in (None, tid):
                # allowed when the old id was ended while the request was away (parked too long), when
                # another request's tokens are a prefix of these or these of its (identical prompts
                # under a deterministic model: content cannot tell them apart), or after two or more
                # skipped calls in a row (rows then look new: tracked afresh)
                old = owner[req.rid]
                other = rec.tokens.get(old, [])
                common = min(len(other), len(req.tokens))
                assert old in rec.ended or other[:common] == req.tokens[:common] or streak >= 2
            owner[req.rid] = tid
            seen[req.rid] = list(req.tokens)
    assert engine.skipped > 5 and engine.continued > 5 and len(engine.finished) > 20
    # every finished request is ended (once out of the batch for park_steps) with the tokens it had
    # when a drafter call last saw it (vLLM skips the call near max_model_len; then a last step is unseen),
    # unless its id passed to an identical-content request
    unique = {tuple(r.tokens) for r in engine.finished}
    checked = 0
    for req in engine.finished[:-10]:  # the last few may still be parked
        if req.rid in owner and sum(tuple(r.tokens) == tuple(req.tokens) for r in engine.finished) == 1:
            assert rec.ended.get(owner[req.rid]) == seen[req.rid]
            checked += 1
    assert checked > 0.5 * len(unique) > 10


def test_resumed_request_continues_its_history():
    """A request that leaves (preempted) and returns within park_steps keeps its id and tokens."""
    rec = Recording()
    drafter = SessionDrafter(rec, tracking=RowTracking(park_steps=1000, max_parked=1000))
    engine = FakeEngine(seed=3, p_preempt=0.2)
    resumed = 0
    for _ in range(300):
        _, chains = engine.step(drafter)
        if chains is not None:
            kinds = drafter.session._tracker.events()[1]
            resumed += int((kinds == 2).sum())
    assert resumed > 10
    assert not rec.ended  # nothing ended: every absence was shorter than park_steps


class _Options(SuffixDrafter):
    OPTIONS = {"use_global": True, "global_cache_bytes": 1 << 20, "park_steps": 3, "log_every": 0}


class _PythonPath(_Options):
    OPTIONS = dict(_Options.OPTIONS, proposer="suffix-python")


def _config(k=3, vocab=VOCAB, max_len=400, **model):
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                           model_config=SimpleNamespace(get_vocab_size=lambda: vocab, max_model_len=max_len, **model))


@pytest.mark.parametrize("seed", range(4))
def test_batched_cpp_path_drafts_exactly_what_the_python_proposer_drafts(seed):
    """SuffixRowBatch (one C++ call a step) == SuffixProposer's begin/commit/propose_scored/end + best path."""
    fast, slow = _Options(_config()), _PythonPath(_config())
    e1, e2 = (FakeEngine(seed=seed, duplicate_prompts=True, p_continue=0.2) for _ in range(2))
    drafted = 0
    for _ in range(300):
        s1, c1 = e1.step(fast)
        s2, c2 = e2.step(slow)
        assert s1 == s2 and c1 == c2
        drafted += sum(len(c) for c in c1 or [])
    assert drafted > 100
    assert e1.accepted > 0.3 * e1.drafted
    assert fast.proposer.global_stats()["documents"] == slow.proposer.global_stats()["documents"] > 0
    assert fast.stats.accepted == slow.stats.accepted > 0
    # both paths learnt the same match-length calibration from the same commits
    assert fast._fast.match_calibration.tested.sum() > 0
    assert (fast._fast.match_calibration.tested == slow.proposer.match_calibration.tested).all()
    assert np.allclose(fast._fast.match_calibration.ratios(), slow.proposer.match_calibration.ratios())


def test_drafts_are_accepted_and_counted():
    import time

    d = _Options(_config())
    engine = FakeEngine(seed=11)
    started = time.perf_counter()
    for _ in range(200):
        engine.step(d)
    wall = time.perf_counter() - started
    assert engine.accepted > 0.3 * engine.drafted > 0
    # the drafter's own count matches what the fake engine verified, up to drafts of rows it skipped
    assert 0.8 * engine.accepted <= d.stats.accepted <= engine.accepted
    # its own time is counted for every call, on the wall clock (the fake engine's clock does not
    # advance it): more than nothing, and no more than the wall time the whole loop took
    assert 0 < d.stats.propose_seconds < wall


def test_the_default_tree_is_num_speculative_tokens_nodes_and_an_option_overrides_it():
    class _Wide(SuffixDrafter):
        OPTIONS = {"tree_budget": 16, "log_every": 0}
    assert _Options(_config(k=3))._fast.tree_budget == 3  # vLLM verifies one chain of at most k
    assert _Options(_config(k=5))._fast.tree_budget == 5
    assert _Wide(_config(k=3))._fast.tree_budget == 16
    with pytest.raises(ValueError, match="'tree_budget' must be >= 1"):
        type("_Bad", (SuffixDrafter,), {"OPTIONS": {"tree_budget": 0}})(_config())


class _Gated(SuffixDrafter):
    OPTIONS = {"gate_off_above": 2, "log_every": 0}


def test_gate_off_above_threshold_drafts_nothing_and_keeps_tracking():
    d = _Gated(_config())
    engine = FakeEngine(seed=5, max_rows=6)
    for _ in range(60):
        sampled, chains = engine.step(d)
        if chains is not None and len(engine.rows) > 2:
            assert all(c == [] for c in chains)
    assert d.stats.steps_gated > 0
    # once the batch shrinks below the gate, drafting resumes from fully tracked requests
    engine.max_rows = 1
    drafted = 0
    for _ in range(80):
        _, chains = engine.step(d)
        drafted += sum(len(c) for c in chains or [])
    assert drafted > 0 and d.stats.steps_drafting > 0


def _scheduled(table, k=3):
    cfg = _config(k=k)
    cfg.speculative_config.num_speculative_tokens_per_batch_size = table
    return cfg


@pytest.mark.parametrize("cost_gate", [False, True])
def test_the_configs_batch_size_schedule_caps_every_chain(cost_gate):
    """vLLM does not apply num_speculative_tokens_per_batch_size to custom_class: the drafter does. Every
    chain holds at most the table's K at the running batch (3 at one request, 1 at 2-3, 0 above), and
    drafting resumes at full K from fully tracked requests once the batch is back to one."""
    drafter_cls = type("_Scheduled", (SuffixDrafter,), {"OPTIONS": {"cost_gate": cost_gate, "log_every": 0}})
    d = drafter_cls(_scheduled([[1, 1, 3], [2, 3, 1], [4, 64, 0]]))
    engine = FakeEngine(seed=5, max_rows=6, duplicate_prompts=True)
    allowed = {1: 3, 2: 1, 3: 1}
    longest: dict[int, int] = {}
    for phase_rows, steps in ((6, 200), (1, 150)):
        engine.max_rows = phase_rows
        for _ in range(steps):
            _, chains = engine.step(d)
            if chains:
                cap = allowed.get(len(chains), 0)
                longest[cap] = max([longest.get(cap, 0)] + [len(c) for c in chains])
    assert longest == {0: 0, 1: 1, 3: 3}
    assert d.stats.steps_gated > 0 and d.stats.steps_drafting > 0


def test_a_schedule_the_drafter_cannot_honour_is_refused_by_name():
    for table, why in (([[1, 4, 5]], "exceeds num_speculative_tokens 3"),
                       ([[2, 4, 1]], "must start at batch size 1"),
                       ([[1, 4, 2], [3, 8, 0]], "non-overlapping")):
        with pytest.raises(ValueError, match=f"num_speculative_tokens_per_batch_size: .*{why}"):
            _Options(_scheduled(table))
    # vLLM sorts the ranges it is given; so does the drafter
    assert _Options(_scheduled([[5, 64, 0], [1, 4, 2]])).gating.schedule.schedule == ((1, 4, 2), (5, 64, 0))


def test_sampled_drafts_are_refused():
    import torch
    from specdec import DraftTree

    class Sampling(Recording):
        def propose(self, req_ids, budget):
            return [DraftTree(torch.tensor([1]), torch.tensor([-1]), deterministic=torch.tensor([False]),
                              draft_probs=torch.full((1, VOCAB), 1.0 / VOCAB)) for _ in req_ids]

    drafter = SessionDrafter(Sampling())
    engine = FakeEngine(seed=0)
    with pytest.raises(ValueError, match="draft_probs=None"):
        for _ in range(20):
            engine.step(drafter)


def test_bad_rows_are_refused_before_any_change():
    """Strict callers get the whole step refused, nothing changed; the drafter refuses a bad row alone."""
    batch = SuffixProposer(VOCAB, cache=SuffixGlobalCache(use_global=False)).row_batch(tree_budget=3)
    tok = np.zeros((2, 8), np.int32)
    n = np.array([3, 2], np.int32)
    batch.step(tok, n, np.array([1, 0], np.int32), 3)
    tracked = batch.tracked
    with pytest.raises(ValueError, match="row 1 sampled 2 tokens of its 2"):
        batch.step(tok, n, np.array([1, 2], np.int32), 3)
    with pytest.raises(ValueError, match="not an id in"):
        batch.step(np.full((2, 8), VOCAB + 1, np.int32), np.array([4, 3], np.int32), np.array([1, 1], np.int32), 3)
    with pytest.raises(TypeError, match="int32"):
        batch.step(tok.astype(np.int64), n, np.array([1, 0], np.int32), 3)
    assert batch.tracked == tracked


def test_a_bad_row_gets_no_draft_and_is_counted_but_never_stops_the_engine(caplog):
    """A tracker error used to raise out of propose and kill vLLM's engine: now that row alone is refused."""
    for drafter in (_Options(_config()), _PythonPath(_config())):
        tok = np.tile(np.array([1, 2, 3, 1, 2, 3, 1, 2], np.int32), (2, 1))
        assert drafter.propose([[3], [2]], np.array([6, 5], np.int32), tok) is not None
        with caplog.at_level("WARNING", logger=LOGGER_NAME):
            chains = drafter.propose([[1], [0, 0, 0, 0, 0, 0]], np.array([7, 6], np.int32), tok)  # row 1: 6 of 6
        assert chains[1] == [] and drafter.stats.rows_refused == 1
        assert "row 1 sampled 6 tokens of its 6" in caplog.text
        bad = tok.copy()
        bad[0, 7] = VOCAB + 3
        chains = drafter.propose([[VOCAB + 3], [1]], np.array([8, 6], np.int32), bad)
        assert chains[0] == [] and drafter.stats.rows_refused == 2
        with pytest.raises(TypeError, match="int32"):  # a broken call contract still fails loudly
            drafter.propose([[1], [2]], np.array([8, 7], np.int32), tok.astype(np.int64))


def test_unscored_branching_tree_and_hidden_state_proposers_are_refused():
    class NeedsHidden(Recording):
        requires_target_hidden = True

    with pytest.raises(ValueError, match="hidden states"):
        RowSession(NeedsHidden())


def test_gated_drafter_refuses_to_run_without_a_gate(monkeypatch):
    from specdec.integrations.vllm.drafter import GatedSuffixDrafter

    monkeypatch.delenv("SPECDEC_VLLM_OPTIONS", raising=False)
    with pytest.raises(ValueError, match="gate_off_above"):
        GatedSuffixDrafter(_config())
    monkeypatch.setenv("SPECDEC_VLLM_OPTIONS", '{"gate_off_above": 4}')
    assert GatedSuffixDrafter(_config()).gating.gate.off_above == 4


class _CostGated(SuffixDrafter):
    OPTIONS = {"cost_gate": True, "log_every": 0}


class _TimedEngine(FakeEngine):
    """FakeEngine with a clock: a step costs ``a + b rows + [drafts] (d + c drafted)``, plus a prefill
    cost for new requests (which the drafter must not fit as a decode step)."""

    def __init__(self, c, d, **kw):
        super().__init__(**kw)
        self.now, self.c, self.d = 0.0, c, d

    def _execute(self):
        drafted = sum(len(r.draft[: self.k]) for r in self.rows if r.prefill_chunks <= 1)
        prefill = sum(len(r.tokens) for r in self.rows if r.prefill_chunks > 0)
        self.now += 0.02 + 0.002 * len(self.rows) + 0.001 * prefill + (drafted > 0) * (self.d + self.c * drafted)
        return super()._execute()


@pytest.mark.parametrize("costly", [True, False])
def test_cost_gate_drafts_only_where_this_engines_steps_make_it_pay(costly):
    """The same requests, two engines: where verifying a draft costs more than it saves the cost gate
    stops drafting (it still explores now and then); where drafts are nearly free it keeps drafting."""
    engine = _TimedEngine(c=0.02 if costly else 0.0001, d=0.02 if costly else 0.0, seed=7)
    d = _CostGated(_config())
    d.gating.clock = lambda: engine.now
    for _ in range(600):
        engine.step(d)
    s = d.stats
    share = s.steps_drafting / (s.steps_drafting + s.steps_gated)
    if costly:
        assert share < 0.25, (share, d.gating.cost.coefficients())
    else:
        assert share > 0.75 and engine.accepted > 0.3 * engine.drafted > 0, share
    a, b, dd, c = d.gating.cost.coefficients()
    # the batch is nearly always full (6 rows), so the fit pins the plain step there, not a and b apart
    assert c == pytest.approx(engine.c, rel=0.3, abs=0.002) and a + 6 * b == pytest.approx(0.032, rel=0.1)
    # a prefilling row costs its prompt (the engine charges 1 ms a token; prompts average ~20 tokens)
    assert 0.005 < d.gating.cost.prefill_seconds() < 0.06


def test_chain_floor_cuts_chains_and_the_tracker_counts_what_was_sent():
    """SuffixRowBatch.step(min_prob=...) stops each chain before its first token below the bar, and
    the row's recorded draft (what acceptance is counted against) is the cut chain."""
    pattern = [5, 6, 7, 8, 9, 10, 11]
    row = pattern + [5, 6, 7, 8, 9, 12] + pattern[:3]  # after "5 6 7": 8 twice, then 9, then 10 or 12
    tok = np.zeros((1, 64), np.int32)
    tok[0, : len(row)] = row
    n, none = np.array([len(row)], np.int32), np.array([0], np.int32)
    whole = SuffixProposer(VOCAB, cache=SuffixGlobalCache(use_global=False)).row_batch(tree_budget=16)
    whole.step(tok, n, none, 4)
    _, chain, probs = whole.step(tok, n, np.array([1], np.int32), 4)
    assert chain.tolist()[:2] == [8, 9] and probs[-1] < probs[0]
    cut = SuffixProposer(VOCAB, cache=SuffixGlobalCache(use_global=False)).row_batch(tree_budget=16)
    cut.step(tok, n, none, 4)
    bar = float(probs[-1]) + 1e-3
    _, short, short_probs = cut.step(tok, n, np.array([1], np.int32), 4, bar)
    assert short.tolist() == chain.tolist()[: int((probs >= bar).sum())] and (short_probs >= bar).all()
    tok[0, len(row)] = 8
    cut.step(tok, n + 1, np.array([1], np.int32), 4, bar)
    assert cut.events()[5].tolist() == [len(short)]  # drafted: the cut chain's length
    with pytest.raises(ValueError, match="min_prob"):
        cut.step(tok, n + 1, np.array([0], np.int32), 4, 1.5)


def test_cost_gate_hands_its_floor_to_the_chains():
    """Once fitted, the drafter cuts chains at the cost gate's bar c * rate (exported in its stats)."""
    engine = _TimedEngine(c=0.004, d=0.002, seed=7)
    d = _CostGated(_config())
    d.gating.clock = lambda: engine.now
    floors = []
    for _ in range(400):
        engine.step(d)
        if d.gating.cost.coefficients() is not None and d.stats.budget > 0:
            floors.append(d.stats.floor)
            assert d.gating.floor == d.stats.floor
    assert floors and max(floors) > 0.0


def test_chain_floor_out_of_range_is_refused():
    from specdec.integrations.rows import best_chain
    from specdec.tree import DraftTree

    tree = DraftTree.chain([3, 4])
    assert best_chain(tree, [0.9, 0.4], 2, 0.5) == [3]
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="min_prob must be in"):
            best_chain(tree, [0.9, 0.4], 2, bad)
