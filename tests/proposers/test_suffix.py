"""SuffixProposer: drafts vs brute-force continuation counts, global cache, tenancy, memory, bad input."""

import dataclasses
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec.proposers.base import Proposer
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixCalibration, SuffixDrafting, SuffixGlobalCache
from specdec.proposers.suffix_rows import RowTracking
from specdec.tree import DraftTree

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NO_GLOBAL = SuffixGlobalCache(use_global=False)  # the request cache alone


def occurs(text, pattern):
    m = len(pattern)
    return any(text[i : i + m] == pattern for i in range(len(text) - m + 1))


def ref_root_distribution(text, min_match_len, prior=0.0):
    """Longest suffix occurring earlier, and {next token: probability} of its earlier occurrences
    (count over the occurrences plus the pseudo-count ``prior``)."""
    n = len(text)
    length = max((k for k in range(n) if occurs(text[:-1], text[n - k :])), default=0)
    if length < min_match_len:
        return length, {}
    pattern = text[n - length :]
    counts = {}
    for i in range(n - length):
        if text[i : i + length] == pattern:
            counts[text[i + length]] = counts.get(text[i + length], 0) + 1
    total = sum(counts.values()) + prior
    return length, {t: c / total for t, c in counts.items()}


def assert_valid_tree(tree, vocab):
    DraftTree(tree.tokens, tree.parents, deterministic=tree.deterministic, vocab_size=vocab)  # validates
    assert bool(tree.deterministic.all())


@SETTINGS
@given(text=st.lists(st.integers(0, 3), min_size=1, max_size=70), budget=st.integers(0, 12),
       min_match=st.integers(1, 3), min_prob=st.sampled_from([0.0, 0.1, 0.3]), factor=st.sampled_from([1.0, 4.0]),
       prior=st.sampled_from([0.0, 1.0, 3.0]))
def test_request_draft_matches_reference(text, budget, min_match, min_prob, factor, prior):
    rules = SuffixDrafting(min_match_len=min_match, min_prob=min_prob, max_depth=8, depth_factor=factor,
                           count_prior=prior)
    prop = SuffixProposer(4, drafting=rules, cache=NO_GLOBAL)
    prop.begin("r", text)
    (scored,) = prop.propose_scored(["r"], budget)
    tree, probs = scored.tree, scored.node_probs.tolist()
    assert_valid_tree(tree, 4)
    assert tree.num_nodes <= budget
    assert math.isclose(scored.expected_accepted, sum(probs), rel_tol=1e-5, abs_tol=1e-6)
    length, dist = ref_root_distribution(text, min_match, prior)
    parents, tokens = tree.parents.tolist(), tree.tokens.tolist()
    roots = {tokens[i]: probs[i] for i in range(len(tokens)) if parents[i] == -1}
    kept = {t: p for t, p in dist.items() if p >= min_prob and p > 0}
    if budget == 0 or not kept:
        assert tree.num_nodes == 0
        return
    # Root children are the best continuations in probability order, with the reference probabilities.
    for t, p in roots.items():
        assert math.isclose(p, kept[t], rel_tol=1e-5)
    if len(roots) < len(kept):
        assert tree.num_nodes == budget
    # Best-first: a node is never less likely than a later node, children never likelier than parents.
    assert all(probs[i] >= probs[i + 1] - 1e-6 for i in range(len(probs) - 1))
    for i, p in enumerate(parents):
        assert probs[i] >= min_prob - 1e-6
        if p >= 0:
            assert probs[i] <= probs[p] + 1e-6
    assert tree.max_depth <= min(8, max(1, math.ceil(factor * length)))
    # Repeating the proposal without a commit gives the same tree.
    again = prop.propose(["r"], budget)[0]
    assert again.tokens.tolist() == tokens and again.parents.tolist() == parents


def ref_root(context, docs, min_match, combine, prior=0.0, global_prior=0.0):
    """{token: probability} from the request's earlier continuations and the documents' ones:
    pooled (``combine="pool"``) or only the cache with the longer match (request on ties); the
    pseudo-count is ``global_prior`` when the documents alone draft, else ``prior``."""
    n = len(context)
    parts = []  # (match length, counts, total) per cache that matches at least min_match tokens
    la = max((k for k in range(n) if occurs(context[:-1], context[n - k :])), default=0)
    if la >= min_match:
        pat, counts, total = context[n - la :], {}, 0
        for i in range(n - la):
            if context[i : i + la] == pat:
                counts[context[i + la]] = counts.get(context[i + la], 0) + 1
                total += 1
        parts.append((la, counts, total, "request"))
    lb = max((k for k in range(n + 1) if any(occurs(d, context[n - k :]) for d in docs)), default=0)
    if lb >= min_match:
        pat, counts, total = context[n - lb :], {}, 0
        for d in docs:
            for i in range(len(d) - lb + 1):
                if d[i : i + lb] == pat:
                    total += 1  # an occurrence at the end of a document counts as "ended here"
                    if i + lb < len(d):
                        counts[d[i + lb]] = counts.get(d[i + lb], 0) + 1
        parts.append((lb, counts, total, "global"))
    if combine == "longest" and len(parts) == 2:
        parts = [parts[1]] if parts[1][0] > parts[0][0] else [parts[0]]
    global_only = len(parts) == 1 and parts[0][3] == "global"
    counts, total = {}, sum(p[2] for p in parts) + (global_prior if global_only else prior)
    for _, c, _, _ in parts:
        for t, k in c.items():
            counts[t] = counts.get(t, 0) + k
    return {t: c / total for t, c in counts.items()} if total else {}


@SETTINGS
@given(docs=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=25), max_size=4),
       context=st.lists(st.integers(0, 3), min_size=1, max_size=25), min_match=st.integers(1, 3),
       combine=st.sampled_from(["longest", "pool"]), priors=st.sampled_from([(0.0, 0.0), (1.0, 8.0), (2.0, 0.5)]))
def test_root_probabilities_come_from_the_longest_match_or_pooled_counts(docs, context, min_match, combine, priors):
    rules = SuffixDrafting(min_match_len=min_match, min_prob=0.0, max_depth=1, combine=combine,
                           count_prior=priors[0], global_count_prior=priors[1])
    prop = SuffixProposer(4, drafting=rules)
    for i, d in enumerate(docs):
        prop.begin(i, [3])
        prop.commit(i, d)
        prop.end(i)
    prop.begin("r", context)
    (scored,) = prop.propose_scored(["r"], 100)
    got = dict(zip(scored.tree.tokens.tolist(), scored.node_probs.tolist()))
    expect = ref_root(context, docs, min_match, combine, *priors)
    assert got.keys() == expect.keys()
    for t in got:
        assert math.isclose(got[t], expect[t], rel_tol=1e-5)


def test_automata_stay_consistent_under_random_traffic():
    rng = np.random.default_rng(5)
    prop = SuffixProposer(8, cache=SuffixGlobalCache(global_cache_bytes=64 * 1024, max_partitions=3))
    live = {}
    for step in range(1500):
        action = rng.integers(3)
        if action == 0 or not live:
            rid = step
            prop.begin(rid, rng.integers(0, 8, size=int(rng.integers(1, 30))), tenant=int(rng.integers(3)))
            live[rid] = True
        elif action == 1:
            rid = list(live)[int(rng.integers(len(live)))]
            prop.propose([rid], int(rng.integers(0, 12)))
            prop.commit(rid, rng.integers(0, 8, size=int(rng.integers(1, 40))))
        else:
            rid = list(live)[int(rng.integers(len(live)))]
            prop.end(rid)
            del live[rid]
        assert prop.global_memory_bytes() <= 3 * 64 * 1024
    for req in prop._requests.values():
        req.sam.check_integrity()
    for part in prop._partitions.values():
        part.sam.check_integrity()
    assert sum(p.rebuilds for p in prop._partitions.values()) > 0


def test_looping_text_drafts_beyond_one_period():
    prop = SuffixProposer(50, drafting=SuffixDrafting(max_depth=10, depth_factor=2.0, count_prior=0.0), cache=NO_GLOBAL)
    prop.begin("r", [7, 8, 9] * 4)
    tree = prop.propose(["r"], 10)[0]
    assert tree.tokens.tolist() == [7, 8, 9, 7, 8, 9, 7, 8, 9, 7]
    # a pseudo-count of 0.5 discounts each single-occurrence step (2/3 each): still past one period
    prop = SuffixProposer(50, drafting=SuffixDrafting(max_depth=10, depth_factor=2.0, count_prior=0.5), cache=NO_GLOBAL)
    prop.begin("r", [7, 8, 9] * 4)
    assert prop.propose(["r"], 10)[0].tokens.tolist() == [7, 8, 9, 7, 8, 9, 7]
    assert tree.is_chain


def test_short_matches_draft_little_or_nothing():
    prop = SuffixProposer(100, drafting=SuffixDrafting(min_match_len=3, depth_factor=1.0), cache=NO_GLOBAL)
    prop.begin("r", [1, 2, 50, 60, 1, 2])  # longest repeated suffix "1 2": below min_match_len
    assert prop.propose(["r"], 8)[0].num_nodes == 0
    prop.commit("r", [50])  # now "1 2 50" repeats: a 3-token match, so depth <= ceil(1.0 * 3)
    tree = prop.propose(["r"], 8)[0]
    assert tree.tokens.tolist() == [60, 1, 2]
    prop2 = SuffixProposer(100, drafting=SuffixDrafting(min_match_len=3, depth_factor=0.5), cache=NO_GLOBAL)
    prop2.begin("r", [1, 2, 50, 60, 1, 2, 50])
    assert prop2.propose(["r"], 8)[0].tokens.tolist() == [60, 1]


def test_global_cache_drafts_previous_responses_without_crossing_documents():
    # cache mechanics, with the plain frequency estimate (no pseudo-count) so drafts run to the end
    prop = SuffixProposer(100, drafting=SuffixDrafting(global_count_prior=0.0))
    prop.begin("a", [90, 91])
    prop.commit("a", [1, 2, 3, 4, 5])
    prop.end("a")
    prop.begin("b", [92])
    prop.commit("b", [6, 7, 8])
    prop.end("b")
    prop.begin("c", [93, 2, 3])
    assert prop.propose(["c"], 8)[0].tokens.tolist() == [4, 5]  # stops at the end of document "a"
    prop.commit("c", [4, 5])
    assert prop.propose(["c"], 8)[0].num_nodes == 0  # "4 5" then "6" would span two documents
    prop.commit("c", [6])
    prop.commit("c", [7])
    # A document added while "c" runs is found (its match is redone when the partition changes).
    prop.begin("d", [94])
    prop.commit("d", [6, 7, 11, 12])
    prop.end("d")
    tree = prop.propose(["c"], 8)[0]
    assert sorted(tree.tokens[tree.parents == -1].tolist()) == [8, 11]
    assert prop.global_stats()["documents"] == 3


def test_prompts_are_indexed_only_when_asked():
    for index_prompts, expect in [(False, 0), (True, 2)]:
        prop = SuffixProposer(100, drafting=SuffixDrafting(global_count_prior=0.0),
                              cache=SuffixGlobalCache(index_prompts=index_prompts))
        prop.begin("a", [10, 11, 12, 13])
        prop.commit("a", [1])
        prop.end("a")
        prop.begin("b", [10, 11])
        assert prop.propose(["b"], 2)[0].num_nodes == expect


def test_tenants_are_isolated_unless_sharing_is_configured():
    response = [5, 6, 7, 8, 9]
    for share in (False, True):
        prop = SuffixProposer(100, drafting=SuffixDrafting(global_count_prior=0.0),
                              cache=SuffixGlobalCache(share_across_tenants=share))
        prop.begin("a", [1], tenant="acme")
        prop.commit("a", response)
        prop.end("a")
        prop.begin("same", [2, 5, 6, 7], tenant="acme")
        prop.begin("other", [2, 5, 6, 7], tenant="globex")
        prop.begin("anon", [2, 5, 6, 7])
        names = ["same", "other", "anon"]
        drafts = {r: t.tokens.tolist() for r, t in zip(names, prop.propose(names, 4))}
        assert drafts["same"] == [8, 9]
        assert drafts["other"] == ([8, 9] if share else [])
        assert drafts["anon"] == ([8, 9] if share else [])


def test_global_memory_cap_is_honoured_and_recent_documents_survive():
    cap = 256 * 1024
    prop = SuffixProposer(49152, drafting=SuffixDrafting(global_count_prior=0.0),
                          cache=SuffixGlobalCache(global_cache_bytes=cap))
    rng = np.random.default_rng(0)
    last = None
    for i in range(200):
        prop.begin(i, rng.integers(0, 49152, size=8))
        last = rng.integers(0, 49152, size=150)
        prop.commit(i, last)
        prop.end(i)
        assert prop.global_memory_bytes() <= cap
    stats = prop.global_stats()
    assert stats["rebuilds"] > 0 and 0 < stats["tokens"] < 200 * 150
    prop.begin("probe", last[:20])
    assert prop.propose(["probe"], 4)[0].tokens.tolist() == last[20:24].tolist()


def test_oversized_document_keeps_its_tail_under_the_cap():
    cap = 128 * 1024
    prop = SuffixProposer(49152, drafting=SuffixDrafting(global_count_prior=0.0),
                          cache=SuffixGlobalCache(global_cache_bytes=cap))
    doc = np.random.default_rng(3).integers(0, 49152, size=100_000)
    prop.begin("big", [1])
    prop.commit("big", doc)
    prop.end("big")
    assert prop.global_memory_bytes() <= cap
    assert 0 < prop.global_stats()["tokens"] < doc.size
    prop.begin("probe", doc[-40:-30])
    assert prop.propose(["probe"], 3)[0].tokens.tolist() == doc[-30:-27].tolist()


def test_partitions_beyond_max_are_dropped_least_recent_first():
    prop = SuffixProposer(100, cache=SuffixGlobalCache(max_partitions=2))
    for tenant in ("t1", "t2", "t3"):
        prop.begin(tenant, [1], tenant=tenant)
        prop.commit(tenant, [2, 3, 4])
        prop.end(tenant)
    assert prop.global_stats("t1")["documents"] == 0
    assert prop.global_stats("t3")["documents"] == 1


def heap_in_use():
    """Bytes malloc has handed out and not had back, every arena and mmapped chunk included (glibc's
    ``mallinfo2``): the C++ automata and the numpy buffers, to the byte, where RSS moves by pages
    and keeps what the allocator does not return."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                          "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("needs glibc >= 2.33 (mallinfo2) to count the heap in use")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


@pytest.mark.parametrize("use_global", [False, True])
def test_memory_is_flat_over_request_cycles(use_global):
    """5,000 begin/propose/commit/end cycles after 1,000 of warm-up leave nothing behind, counted
    rather than read off RSS: without the global cache the heap in use and Python's allocated
    blocks return to their level; with a capped global cache (which fills and rebuilds many times
    over), the heap in use less the bytes the cache accounts for does. A request's state is a few KB,
    so a leak of even a few bytes a cycle fails."""
    import gc
    import sys

    cap = 1 << 20
    prop = SuffixProposer(49152, cache=SuffixGlobalCache(use_global=use_global, global_cache_bytes=cap))
    rng = np.random.default_rng(0)
    prompts = rng.integers(0, 49152, size=(64, 48)).astype(np.int32)
    outs = rng.integers(0, 49152, size=(64, 24)).astype(np.int32)

    def cycle(i):
        prop.begin(i, prompts[i % 64])
        prop.propose([i], 8)
        prop.commit(i, outs[i % 64][:12])
        prop.propose([i], 8)
        prop.commit(i, outs[(i * 7) % 64][12:])
        prop.end(i)

    def level():
        gc.collect()
        return heap_in_use() - prop.global_memory_bytes(), sys.getallocatedblocks()

    for i in range(1000):
        cycle(i)
    heap0, blocks0 = level()
    rebuilds0 = prop.global_stats()["rebuilds"]
    for i in range(1000, 6000):
        cycle(i)
    heap1, blocks1 = level()
    assert prop.active_requests == 0
    if use_global:
        assert 0 < prop.global_memory_bytes() <= cap and prop.global_stats()["rebuilds"] - rebuilds0 >= 3
        assert heap1 - heap0 < 64 << 10, f"{heap1 - heap0} bytes more in use after 5000 cycles"
    else:
        assert prop.global_memory_bytes() == 0
        assert heap1 - heap0 < 4 << 10 and blocks1 - blocks0 < 16, (heap1 - heap0, blocks1 - blocks0)


def test_follows_the_proposer_protocol():
    prop = SuffixProposer(10)
    assert isinstance(prop, Proposer)
    assert prop.artifact.bound_to == "nothing"
    prop.begin("x", torch.tensor([1, 2, 1, 2]))
    prop.begin("y", np.array([3, 3, 3], dtype=np.int64))
    trees = prop.propose(["x", "y"], [3, 0])
    assert [t.tokens.tolist() for t in trees] == [[1, 2, 1], []]  # the loop "1 2", 3 nodes; budget 0
    assert prop.memory_bytes() > 0


@pytest.mark.parametrize(
    "call,exc,msg",
    [
        (lambda p: p.propose(["nope"], 4), KeyError, "unknown request"),
        (lambda p: p.commit("nope", [1]), KeyError, "unknown request"),
        (lambda p: p.end("nope"), KeyError, "unknown request"),
        (lambda p: p.begin("r", [1]), ValueError, "already begun"),
        (lambda p: p.begin("s", [1, -2]), ValueError, r"token id -2, expected ids in \[0, 10\)"),
        (lambda p: p.begin("s", [10]), ValueError, r"\[0, 10\)"),
        (lambda p: p.begin("s", torch.tensor([1.0])), TypeError, "integer token ids"),
        (lambda p: p.begin("s", [[1, 2]]), ValueError, "1-D"),
        (lambda p: p.commit("r", np.array([0.5])), TypeError, "integer token ids"),
        (lambda p: p.propose(["r"], -1), ValueError, "budget"),
        (lambda p: p.propose(["r"], [1, 2]), ValueError, "budgets"),
        (lambda p: p.begin("s", [1], tenant=[1]), TypeError, "tenant must be hashable"),
    ],
)
def test_bad_input_raises_clear_errors(call, exc, msg):
    prop = SuffixProposer(10)
    prop.begin("r", [1, 2])
    with pytest.raises(exc, match=msg):
        call(prop)


BAD_OPTIONS = [
    (SuffixDrafting, "min_match_len", 0), (SuffixDrafting, "min_match_len", 1.5), (SuffixDrafting, "min_prob", 1.5),
    (SuffixDrafting, "max_depth", -1), (SuffixDrafting, "max_depth", True), (SuffixDrafting, "depth_factor", "4"),
    (SuffixDrafting, "combine", "sum"), (SuffixDrafting, "count_prior", -1.0),
    (SuffixDrafting, "global_count_prior", float("inf")), (SuffixDrafting, "rematch_window", 0),
    (SuffixGlobalCache, "use_global", "yes"), (SuffixGlobalCache, "freeze_global", 1),
    (SuffixGlobalCache, "global_cache_bytes", 10), (SuffixGlobalCache, "max_partitions", 0),
    (SuffixGlobalCache, "index_prompts", None), (SuffixGlobalCache, "share_across_tenants", "no"),
    (SuffixCalibration, "mode", "yes"), (SuffixCalibration, "prior", 0.0), (SuffixCalibration, "prior", float("nan")),
]


@pytest.mark.parametrize("cls,field,bad", BAD_OPTIONS)
def test_each_option_refuses_a_bad_value_naming_its_field(cls, field, bad):
    with pytest.raises(ValueError, match=rf"^{cls.__name__}\.{field} must be .*got {re.escape(repr(bad))}$"):
        cls(**{field: bad})


def test_every_option_field_has_a_refusal_case():
    covered = {(cls, field) for cls, field, _ in BAD_OPTIONS}
    for cls in (SuffixDrafting, SuffixGlobalCache, SuffixCalibration):
        assert {(cls, f.name) for f in dataclasses.fields(cls)} <= covered, cls.__name__


def test_options_default_to_the_documented_settings_and_store_plain_numbers():
    prop = SuffixProposer(10)
    assert dataclasses.asdict(prop.drafting) == dict(min_match_len=1, min_prob=0.05, max_depth=32, depth_factor=4.0,
                                                     combine="longest", count_prior=0.0, global_count_prior=0.0,
                                                     rematch_window=1024)
    assert dataclasses.asdict(prop.cache) == dict(use_global=True, freeze_global=False, global_cache_bytes=256 << 20,
                                                  max_partitions=64, index_prompts=False, share_across_tenants=False)
    assert prop.calibration == SuffixCalibration("online", 4.0)
    assert prop.artifact.details == {"global_cache_bytes": 256 << 20, "share_across_tenants": False,
                                     "combine": "longest", "count_prior": 0.0, "global_count_prior": 0.0,
                                     "calibrate": "online"}
    rules = SuffixDrafting(max_depth=np.int64(4), count_prior=1)
    assert type(rules.max_depth) is int and type(rules.count_prior) is float


def test_options_of_the_wrong_class_and_the_old_keywords_are_refused():
    with pytest.raises(TypeError, match="drafting must be a SuffixDrafting, got dict"):
        SuffixProposer(10, drafting={"max_depth": 4})
    with pytest.raises(TypeError, match="cache must be a SuffixGlobalCache, got SuffixDrafting"):
        SuffixProposer(10, cache=SuffixDrafting())
    with pytest.raises(TypeError, match="min_match_len"):
        SuffixProposer(10, min_match_len=2)  # removed in 0.3: the settings live in the option objects


def test_warm_equals_ending_requests_with_those_responses():
    docs = [[1, 2, 3, 4, 5], [6, 7, 8], [2, 3, 9]]
    ended = SuffixProposer(100)
    for i, d in enumerate(docs):
        ended.begin(i, [90 + i])
        ended.commit(i, d)
        ended.end(i)
    warmed = SuffixProposer(100)
    assert warmed.warm([docs[0], np.array(docs[1]), torch.tensor(docs[2]), []]) == 11
    assert warmed.global_stats() == ended.global_stats()
    for prop in (ended, warmed):
        prop.begin("q", [50, 2, 3])
    assert warmed.propose(["q"], 8)[0].tokens.tolist() == ended.propose(["q"], 8)[0].tokens.tolist() != []
    other = SuffixProposer(100)
    other.warm([docs[0]], tenant="acme")
    other.begin("anon", [2, 3])
    assert other.propose(["anon"], 4)[0].num_nodes == 0  # warmed into acme's partition only
    with pytest.raises(ValueError, match=r"documents\[1\] contains token id 100"):
        other.warm([[1], [100]])
    with pytest.raises(ValueError, match="use_global=False"):
        SuffixProposer(100, cache=NO_GLOBAL).warm([[1]])


@pytest.mark.parametrize("cache", [SuffixGlobalCache(), SuffixGlobalCache(index_prompts=True),
                                   SuffixGlobalCache(freeze_global=True), NO_GLOBAL])
def test_ended_requests_are_filed_by_one_rule_on_both_paths(cache):
    """end(), index_ended() and the row batch file the same document (the response, the prompt too
    under index_prompts) and nothing when the cache is off or frozen."""
    text = [1, 2, 3, 4, 5, 6, 7, 8]
    want = [] if not cache.use_global or cache.freeze_global else [text[0 if cache.index_prompts else 3:]]
    ended, filed, rows = (SuffixProposer(20, cache=cache) for _ in range(3))
    ended.begin(0, [1, 2, 3])
    ended.commit(0, [4, 5, 6, 7, 8])
    ended.end(0)
    filed.index_ended(np.array([1, 2, 3, 4, 5, 6, 7, 8]), 3)
    batch = rows.row_batch(tree_budget=4, tracking=RowTracking(park_steps=1, max_parked=0))
    tok = np.zeros((1, 16), np.int32)
    tok[0, :8] = [1, 2, 3, 4, 5, 6, 7, 8]
    batch.step(tok, np.array([3], np.int32), np.array([0], np.int32), 4)  # prompt 1 2 3
    for n in range(4, 9):
        batch.step(tok, np.array([n], np.int32), np.array([1], np.int32), 4)
    batch.step(np.zeros((0, 1), np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32), 4)  # it leaves
    for prop in (ended, filed, rows):
        assert [d.tolist() for d in prop.global_documents()] == want
    assert ended.keeps_ended == bool(want)


def test_index_ended_and_global_documents_refuse_misuse():
    prop = SuffixProposer(20)
    with pytest.raises(ValueError, match=r"prompt_len must be in \[0, 2\], got 3"):
        prop.index_ended([1, 2], 3)
    with pytest.raises(ValueError, match="token id 20"):
        prop.index_ended([1, 20], 1)
    prop.index_ended([1, 2, 3], 1, tenant="acme")
    assert prop.global_documents() == [] and [d.tolist() for d in prop.global_documents("acme")] == [[2, 3]]
    with pytest.raises(ValueError, match="read-only"):
        prop.global_documents("acme")[0][0] = 7
