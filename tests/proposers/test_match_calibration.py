"""Match-length calibration of suffix drafts (csrc/suffix/match_calibration.h, SuffixCalibration(mode=...)).

What must hold: cells bucket what they say; only nodes whose parent was accepted count as tested,
each scored against the committed token at its depth; the calibrated conditional is the raw one
times the cell's ratio; a cell's evidence halves past max_weight; the proposer learns online,
drafts with a frozen table when asked, and with raw frequencies when off; and on a stream where
long matches are reliable and short ones are not, the calibration finds it (its estimates match
what is accepted, the raw ones are several times too high) so drafts get shorter where they fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixCalibration, SuffixGlobalCache
from specdec.proposers.suffix_automaton import MatchCalibration, SuffixAutomaton, build_suffix_draft

LB, EB, SB = MatchCalibration.length_buckets, MatchCalibration.evidence_buckets, MatchCalibration.share_buckets


def cell_of(cache: int, length_bucket: int, evidence: int, share: int) -> int:
    return ((cache * LB + length_bucket) * EB + evidence) * SB + share


@pytest.mark.parametrize("ctx_len, bucket", [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4), (16, 4),
                                             (17, 5), (32, 5), (33, 6), (64, 6), (65, 7), (10_000, 7)])
def test_length_buckets_are_powers_of_two(ctx_len, bucket):
    assert MatchCalibration.cell("request", ctx_len, 1, 1) == cell_of(0, bucket, 0, 0)


def test_evidence_share_and_cache_select_the_cell():
    assert MatchCalibration.cell("request", 1, 3, 3) == cell_of(0, 0, 1, 0)
    assert MatchCalibration.cell("request", 1, 2, 4) == cell_of(0, 0, 1, 1)   # share 1/2
    assert MatchCalibration.cell("request", 1, 1, 4) == cell_of(0, 0, 1, 2)   # share 1/4
    assert MatchCalibration.cell("request", 1, 40, 40) == cell_of(0, 0, 2, 0)
    assert MatchCalibration.cell("global", 1, 1, 1) == cell_of(1, 0, 0, 0)
    assert MatchCalibration.cell("pooled", 1, 1, 1) == cell_of(2, 0, 0, 0)
    assert MatchCalibration.num_cells == 3 * LB * EB * SB


def test_observe_counts_only_nodes_whose_parent_was_accepted():
    # tree: 0 -> 1 -> 2 on one branch, 3 a sibling of 0, 4 a child of 3 (never reached)
    tokens = np.array([10, 11, 12, 20, 21], dtype=np.int64)
    parents = np.array([-1, 0, 1, -1, 3], dtype=np.int32)
    cells = np.array([0, 1, 2, 3, 4], dtype=np.int32)
    raws = np.array([0.5, 0.5, 0.5, 0.25, 0.5], dtype=np.float32)
    c = MatchCalibration()
    c.observe(tokens, parents, cells, raws, np.array([10, 11, 99], dtype=np.int32))
    # node 0 accepted, 1 accepted, 2 rejected (99 committed there), 3 rejected, 4 untested
    assert c.tested[:5].tolist() == [1, 1, 1, 1, 0]
    assert c.accepted[:5].tolist() == [1, 1, 0, 0, 0]
    assert c.predicted[:5].tolist() == pytest.approx([0.5, 0.5, 0.5, 0.25, 0])
    # a node deeper than the committed tokens is not tested: the target's token there is unknown
    c2 = MatchCalibration()
    c2.observe(tokens, parents, cells, raws, np.array([10], dtype=np.int32))
    assert c2.tested[:5].tolist() == [1, 0, 0, 1, 0]
    ratios = c.ratios()
    assert ratios[0] == pytest.approx((1 + 4) / (0.5 + 4)) and ratios[3] == pytest.approx(4 / 4.25)
    assert ratios[10] == 1.0  # no evidence: the raw estimate stands


def test_evidence_fades_past_max_weight():
    c = MatchCalibration(prior_weight=1.0, max_weight=8.0)
    one = (np.array([5], np.int64), np.array([-1], np.int32), np.array([7], np.int32), np.array([1.0], np.float32))
    for _ in range(20):
        c.observe(*one, np.array([6], dtype=np.int32))  # always rejected
    assert c.predicted[7] <= 8.0 and c.accepted[7] == 0 and c.tested[7] == 20
    assert c.ratios()[7] == pytest.approx(1.0 / (c.predicted[7] + 1.0))


def test_calibrated_conditionals_scale_the_raw_ones_and_reach_deeper_where_cells_are_good():
    sam = SuffixAutomaton(50)
    sam.extend(np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 5, 1, 2, 3], dtype=np.int32))
    length, state = sam.repeat_match()
    src = [(sam, length, state)]
    toks, parents, probs, cells, raws, ctx = build_suffix_draft(src, 16, 1, 0.05, 5, 0.0, 0.0, None, "request", True)
    assert toks.tolist() == [4, 5, 6, 7, 8] and parents.tolist() == [-1, 0, 1, 2, 3]
    assert probs.tolist() == pytest.approx(np.cumprod(raws).tolist())  # path probability = product
    assert ctx.tolist() == list(range(length, length + toks.size))      # the match grows one per depth
    c = MatchCalibration()
    for _ in range(50):  # every first node rejected, every cell of depth >= 2 never tested
        c.observe(toks[:1], parents[:1], cells[:1], raws[:1], np.array([49], dtype=np.int32))
    t2, _, p2, *_ = build_suffix_draft(src, 16, 1, 0.05, 8, 0.0, 0.0, c, "request", True)
    assert p2[0] == pytest.approx(raws[0] * c.ratios()[cells[0]], rel=1e-6) and p2[0] < 0.1 * probs[0]
    assert t2.size < toks.size  # the bad first cell cut the chain under min_prob


def test_proposer_learns_online_freezes_and_turns_off():
    def run(mode=None):
        prop = SuffixProposer(20, cache=SuffixGlobalCache(use_global=False), calibration=SuffixCalibration(mode))
        prop.begin(0, [1, 2, 3, 1, 2])
        for _ in range(30):
            (d,) = prop.propose_scored([0], 8)
            first = d.tree.tokens[0].item() if d.tree.num_nodes else 0
            prop.commit(0, [min({1, 2, 3} - {first})])  # never the best first guess
        (d,) = prop.propose_scored([0], 8)
        return prop, d
    online, d_on = run()
    frozen, d_fr = run("frozen")
    off, d_off = run("off")
    assert online.match_calibration.tested.sum() > 0 and frozen.match_calibration.tested.sum() == 0
    assert off.match_calibration.tested.sum() == 0
    assert d_fr.node_probs.tolist() == d_off.node_probs.tolist()  # an empty table is the raw estimate
    assert d_on.expected_accepted < d_off.expected_accepted
    assert SuffixProposer(20, cache=SuffixGlobalCache(freeze_global=True)).calibration.mode == "frozen"
    assert SuffixProposer(20).calibration.mode == "online"
    given = SuffixCalibration("off", prior=2.0)  # an explicit mode wins over the frozen cache's default
    assert SuffixProposer(20, cache=SuffixGlobalCache(freeze_global=True), calibration=given).calibration is given
    assert SuffixProposer(20, calibration=SuffixCalibration(prior=2.0)).match_calibration.prior_weight == 2.0


def test_bad_calibration_input_is_refused():
    with pytest.raises(ValueError, match="prior_weight"):
        MatchCalibration(prior_weight=0.0)
    with pytest.raises(ValueError, match="max_weight"):
        MatchCalibration(prior_weight=4.0, max_weight=1.0)
    c = MatchCalibration()
    ok = (np.array([1], np.int64), np.array([-1], np.int32), np.array([0], np.int32), np.array([1.0], np.float32))
    with pytest.raises(TypeError, match="dtype int32"):
        c.observe(ok[0], ok[1].astype(np.int64), ok[2], ok[3], np.array([1], np.int32))
    with pytest.raises(ValueError, match="expected 1 entries"):
        c.observe(ok[0], ok[1], np.array([0, 0], np.int32), ok[3], np.array([1], np.int32))
    with pytest.raises(ValueError, match="cell out of range"):
        c.observe(ok[0], ok[1], np.array([MatchCalibration.num_cells], np.int32), ok[3], np.array([1], np.int32))
    with pytest.raises(ValueError, match="parents must precede"):
        c.observe(ok[0], np.array([0], np.int32), ok[2], ok[3], np.array([1], np.int32))
    with pytest.raises(ValueError, match="cache must be"):
        MatchCalibration.cell("both", 1, 1, 1)


def _stream(rng, n_docs: int):
    """Documents where long repeats are exact copies and short repeats continue at random: a long
    match predicts its continuation, a 1-2 token match does not (the pattern of SmolLM2's answers)."""
    phrases = [rng.integers(0, 400, size=int(rng.integers(12, 30))).tolist() for _ in range(40)]
    for _ in range(n_docs):
        doc = []
        while len(doc) < 300:
            if rng.random() < 0.5:
                doc += phrases[int(rng.integers(len(phrases)))]   # a copy: long matches continue
            else:
                doc += rng.integers(0, 400, size=8).tolist()      # noise: short chance matches fail
        yield doc


def _replay(prop, docs):
    """Greedy replay: (estimated accepted, accepted, drafted) summed over every step."""
    est = acc = drafted = 0.0
    for i, doc in enumerate(docs):
        prop.begin(i, doc[:20])
        pos = 20
        while pos < len(doc):
            (d,) = prop.propose_scored([i], 8)
            toks, parents = d.tree.tokens.tolist(), d.tree.parents.tolist()
            matched, a = {-1: True}, 0
            for v, (t, p) in enumerate(zip(toks, parents)):
                depth = d.tree.depth_list[v]
                matched[v] = matched[p] and pos + depth - 1 < len(doc) - 1 and doc[pos + depth - 1] == t
                a = max(a, depth if matched[v] else 0)
            est, acc, drafted = est + d.expected_accepted, acc + a, drafted + len(toks)
            prop.commit(i, doc[pos : pos + a + 1])
            pos += a + 1
        prop.end(i)
    return est, acc, drafted


def test_calibration_finds_that_long_matches_are_reliable_and_short_ones_not():
    docs = list(_stream(np.random.default_rng(0), 60))
    warm, test = docs[:40], docs[40:]
    on, off = SuffixProposer(400), SuffixProposer(400, calibration=SuffixCalibration(mode="off"))
    _replay(on, warm)
    _replay(off, warm)
    est_on, acc_on, dr_on = _replay(on, test)
    est_off, acc_off, dr_off = _replay(off, test)
    assert est_off > 2.0 * acc_off                     # raw frequencies: far too confident
    assert est_on == pytest.approx(acc_on, rel=0.25)   # calibrated: close to what is accepted
    assert acc_on / dr_on > 1.3 * acc_off / dr_off     # fewer wasted nodes per accepted one
    assert acc_on > 0.9 * acc_off                      # at nearly the same acceptance
    ratios = on.match_calibration.ratios()
    short = cell_of(0, 0, 0, 0)                        # a single continuation after a 1-token match
    long = cell_of(0, 4, 0, 0)                         # the same after a 9-16-token match
    assert on.match_calibration.tested[short] > 50 and on.match_calibration.tested[long] > 50
    assert ratios[long] > 3 * ratios[short]
