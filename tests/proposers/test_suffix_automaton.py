"""SuffixAutomaton (C++) against a brute-force substring-search reference in plain Python."""

import json
import pathlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec.proposers.suffix_automaton import SuffixAutomaton, build_suffix_draft

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "smollm2_token_streams.json"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------- brute-force reference
def occurrences(docs, pattern):
    """Number of (document, end position) pairs where ``pattern`` occurs, matching only within documents."""
    m = len(pattern)
    return sum(1 for d in docs for i in range(len(d) - m + 1) if d[i : i + m] == pattern)


def ref_longest_match(docs, ctx):
    for length in range(len(ctx), 0, -1):
        if occurrences(docs, ctx[len(ctx) - length :]) > 0:
            return length
    return 0


def ref_continuations(docs, pattern):
    """{token: count of pattern+token} over all documents."""
    out = {}
    m = len(pattern)
    for d in docs:
        for i in range(len(d) - m):
            if d[i : i + m] == pattern:
                out[d[i + m]] = out.get(d[i + m], 0) + 1
    return out


def i32(x):
    return np.asarray(x, dtype=np.int32)


def check_against_reference(sam, docs, ctx):
    length, state = sam.longest_match(i32(ctx))
    assert length == ref_longest_match(docs, ctx)
    if length:
        pattern = ctx[len(ctx) - length :]
        assert sam.state_len(state) >= length > sam.state_len(sam.state_link(state))
        assert sam.count(state) == occurrences(docs, pattern)
        toks, targets, counts = sam.transitions(state)
        assert dict(zip(toks.tolist(), counts.tolist())) == ref_continuations(docs, pattern)
        for t, tgt in zip(toks.tolist(), targets.tolist()):
            assert sam.transition(state, t) == tgt


# ---------------------------------------------------------------- property tests
def streams(alphabet):
    return st.lists(st.integers(0, alphabet - 1), min_size=0, max_size=80)


@pytest.mark.parametrize("vocab,alphabet", [(3, 3), (49152, 6), (49152, 400)])
@SETTINGS
@given(data=st.data())
def test_single_stream_matches_reference(vocab, alphabet, data):
    base = data.draw(st.lists(st.integers(0, alphabet - 1), max_size=80))
    spread = data.draw(st.sampled_from([1, vocab // max(alphabet, 1)]))
    text = [t * spread for t in base]
    # counts in the plain array, in the link-cut forest from the start, or moved there mid-text
    sam = SuffixAutomaton(vocab, walk_limit=data.draw(st.sampled_from([0, 2, 4, 64])))
    chunk = data.draw(st.integers(1, 9))
    for i in range(0, len(text), chunk):
        sam.extend(i32(text[i : i + chunk]))
        sam.check_integrity()
    assert len(sam) == len(text)
    for _ in range(4):
        ctx = [t * spread for t in data.draw(streams(alphabet).map(lambda x: x[:8]))]
        if text and data.draw(st.booleans()):
            j = data.draw(st.integers(0, len(text) - 1))
            ctx = ctx + text[j : j + data.draw(st.integers(1, 12))]
        check_against_reference(sam, [text], ctx)
    rep_len, rep_state = sam.repeat_match()
    expect = max((k for k in range(len(text)) if occurrences([text[:-1]], text[len(text) - k :]) > 0), default=0)
    assert rep_len == expect
    if rep_len:
        assert sam.count(rep_state) == occurrences([text], text[len(text) - rep_len :])


@SETTINGS
@given(docs=st.lists(st.lists(st.integers(0, 3), max_size=30), min_size=1, max_size=5), data=st.data())
def test_documents_never_match_across_boundaries(docs, data):
    sam = SuffixAutomaton(4, walk_limit=data.draw(st.sampled_from([0, 3, 64])))
    for d in docs:
        sam.add_document(i32(d))
        sam.check_integrity()
    for _ in range(5):
        ctx = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=12))
        check_against_reference(sam, docs, ctx)
    # A context built from the end of one document and the start of the next matches only within one.
    for a, b in zip(docs, docs[1:]):
        if a and b:
            ctx = a[-3:] + b[:3]
            assert sam.longest_match(i32(ctx))[0] == ref_longest_match(docs, ctx)


@SETTINGS
@given(text=st.lists(st.integers(0, 2), max_size=60), more=st.lists(st.integers(0, 2), max_size=40),
       ctx=st.lists(st.integers(0, 2), max_size=20), tail=st.lists(st.integers(0, 2), max_size=10))
def test_advance_stays_valid_across_later_extends(text, more, ctx, tail):
    """A match taken before further extends (which may split its state) still advances correctly."""
    sam = SuffixAutomaton(3)
    sam.extend(i32(text))
    length, state = sam.longest_match(i32(ctx))
    sam.extend(i32(more))
    got = sam.advance(length, state, i32(tail))
    # Matching is only guaranteed to be at least as long as a fresh match over ctx's old match + tail.
    fresh = sam.longest_match(i32(ctx[len(ctx) - length :] + tail) if length else i32(tail))
    assert got[0] == fresh[0]
    if got[0]:
        assert sam.count(got[1]) == occurrences([text + more], (ctx + tail)[len(ctx) + len(tail) - got[0] :])


def test_real_smollm2_token_streams():
    data = json.loads(DATA.read_text())
    vocab = data["vocab_size"]
    docs = [s["ids"] for s in data["streams"]]
    sam = SuffixAutomaton(vocab)
    for d in docs:
        sam.add_document(i32(d))
    sam.check_integrity()
    assert not sam.counts_linked, "natural text walks short suffix-link paths: counts stay a plain array"
    rng = np.random.default_rng(0)
    for _ in range(40):
        d = docs[rng.integers(len(docs))]
        j = int(rng.integers(len(d)))
        noise = [int(t) for t in rng.integers(0, vocab, size=int(rng.integers(0, 3)))]
        ctx = noise + d[j : j + int(rng.integers(1, 15))]
        check_against_reference(sam, docs, ctx)
    # Per-request view: one long stream, extended chunk by chunk.
    stream = max(docs, key=len)
    req = SuffixAutomaton(vocab)
    for i in range(0, len(stream), 50):
        req.extend(i32(stream[i : i + 50]))
        length, state = req.repeat_match()
        prefix = stream[: min(len(stream), i + 50)]
        if length:
            assert req.count(state) == occurrences([prefix], prefix[len(prefix) - length :])
    req.check_integrity()


def test_repetitive_text_counts_and_speed():
    """'a a a ...' makes suffix-link paths as long as the text; counts must stay exact and fast."""
    n = 50_000
    sam = SuffixAutomaton(2, walk_limit=64)
    sam.extend(np.zeros(63, dtype=np.int32))  # the 63rd token walks 64 states: root, 'a', ..., 'a' * 63
    assert not sam.counts_linked
    sam.extend(np.zeros(n - 63, dtype=np.int32))
    assert sam.counts_linked, "a path longer than walk_limit moves the counts to the link-cut forest"
    sam.check_integrity()
    for k in (1, 7, 1000, n):
        length, state = sam.longest_match(np.zeros(k, dtype=np.int32))
        assert length == k
        assert sam.count(state) == n - k + 1
    assert sam.num_states == n + 1


def test_memory_is_compact_on_large_vocabulary():
    rng = np.random.default_rng(1)
    # Zipf-like ids over a 49k vocabulary with repeated phrases, like real token streams.
    phrases = [rng.zipf(1.3, size=int(rng.integers(5, 40))) % 49152 for _ in range(300)]
    text = np.concatenate([phrases[int(i)] for i in rng.integers(0, 300, size=3000)]).astype(np.int32)
    sam = SuffixAutomaton(49152)
    sam.extend(text)
    assert sam.memory_bytes() / len(text) <= 150
    assert sam.num_states <= 2 * len(text)
    sam.check_integrity()


# ---------------------------------------------------------------- bad input
def test_zero_copy_inputs_accepted():
    sam = SuffixAutomaton(10)
    sam.extend(torch.tensor([1, 2, 3], dtype=torch.int32))
    sam.extend(np.array([4, 5], dtype=np.int32))
    sam.extend(np.array([], dtype=np.int32))
    sam.extend(np.arange(12, dtype=np.int32)[::4][:1])  # one element: stride irrelevant
    assert len(sam) == 6
    assert sam.longest_match(torch.tensor([2, 3, 4], dtype=torch.int32))[0] == 3


@pytest.mark.parametrize(
    "bad,exc,msg",
    [
        (np.array([1, 2], dtype=np.int64), TypeError, "int32"),
        (np.array([1.0, 2.0], dtype=np.float32), TypeError, "int32"),
        (np.array([1, 2], dtype=np.uint32), TypeError, "int32"),
        (torch.tensor([1, 2]), TypeError, "int32"),
        ([1, 2, 3], TypeError, "numpy array or CPU torch tensor"),
        (np.zeros((2, 2), dtype=np.int32), ValueError, "1-D"),
        (np.arange(10, dtype=np.int32)[::2], ValueError, "contiguous"),
        (torch.arange(10, dtype=torch.int32)[::2], ValueError, "contiguous"),
        (np.array([1, -1], dtype=np.int32), ValueError, "-1 is not a token id"),
        (np.array([1, 10], dtype=np.int32), ValueError, r"\[0, 10\)"),
    ],
)
def test_bad_token_arrays_are_refused(bad, exc, msg):
    sam = SuffixAutomaton(10)
    sam.extend(i32([1, 2, 3]))
    with pytest.raises(exc, match=msg):
        sam.extend(bad)
    with pytest.raises(exc, match=msg):
        sam.longest_match(bad)
    assert len(sam) == 3  # a refused array changes nothing
    sam.check_integrity()


def test_counts_stay_exact_across_the_move_to_the_forest():
    """Clones, documents and a mid-text move: every count against brute force before and after."""
    rng = np.random.default_rng(5)
    docs = [[int(t) for t in rng.integers(0, 3, size=int(rng.integers(5, 40)))] for _ in range(6)]
    docs.append([1] * 20 + [0, 2] * 10)  # a run and a period: long suffix-link paths
    sam = SuffixAutomaton(3, walk_limit=8)
    linked_at = None
    for i, d in enumerate(docs):
        sam.add_document(i32(d))
        sam.check_integrity()
        if sam.counts_linked and linked_at is None:
            linked_at = i
        for _ in range(10):
            j = int(rng.integers(len(d)))
            check_against_reference(sam, docs[: i + 1], d[j : j + int(rng.integers(1, 8))])
    assert linked_at is not None and linked_at > 0, "the move happened after some documents, not at the start"


def test_bad_walk_limit_is_refused():
    with pytest.raises(ValueError, match="walk_limit must be >= 0"):
        SuffixAutomaton(10, walk_limit=-1)
    assert SuffixAutomaton(10, walk_limit=0).counts_linked


def test_bad_states_and_sizes_are_refused():
    with pytest.raises(ValueError, match="vocab_size"):
        SuffixAutomaton(0)
    sam = SuffixAutomaton(5)
    sam.extend(i32([1, 2]))
    with pytest.raises(ValueError, match="state 99"):
        sam.count(99)
    with pytest.raises(ValueError, match="state -1"):
        sam.transitions(-1)
    with pytest.raises(ValueError, match="match length"):
        sam.advance(5, 1, i32([1]))


def test_draft_builder_refuses_a_bad_count_prior():
    sam = SuffixAutomaton(8)
    sam.extend(np.array([1, 2, 1, 2], dtype=np.int32))
    length, state = sam.repeat_match()
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="count_prior must be finite and >= 0"):
            build_suffix_draft([(sam, length, state)], 4, count_prior=bad)


# ---------------------------------------------------------------- tie order
def test_draft_ties_are_broken_by_parent_then_token():
    """After "2": 5 (2 of 5), then 2, 1, 3 (1 each); "2 5" is always followed by 2, and "2 5 2" by 5 or 3.
    Nodes 5 (0.4) and 5-2 (0.4) come first; then five nodes tie at 0.2, and the third node must be the
    root's child with the smallest token (1). Before ties were ordered, the heap's internal order
    picked 2 (and 509 of 3,000 random small trees differed from this rule)."""
    sam = SuffixAutomaton(8)
    for doc in ([2, 2, 1], [5, 2, 5, 2, 5, 2, 3]):
        sam.add_document(i32(doc))
    length, state = sam.longest_match(i32([2]))
    toks, parents, probs = build_suffix_draft([(sam, length, state)], 3, 1, 0.0, 4, 0.0)
    assert toks.tolist() == [5, 2, 1] and parents.tolist() == [-1, 0, -1]
    assert probs.tolist() == pytest.approx([0.4, 0.4, 0.2])
