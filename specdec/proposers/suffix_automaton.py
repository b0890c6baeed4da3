"""``SuffixAutomaton`` and ``build_suffix_draft``: the C++ suffix automaton, re-exported.

The automaton lives in the compiled extension (``csrc/suffix/``) because the proposer's hot path
(extend per committed token, draft per step) must not make per-token Python calls.

``SuffixAutomaton(vocab_size, walk_limit=64)``
    ``extend(tokens)``, ``add_document(tokens)`` (appends a separator so no match spans two
    documents), ``longest_match(context) -> (length, state)``, ``advance(length, state, tokens)``,
    ``repeat_match() -> (length, state)`` (longest suffix of the text that occurs earlier),
    ``count(state)`` (exact occurrences), ``transitions(state) -> (tokens, targets, counts)``,
    ``state_len``, ``state_link``, ``memory_bytes()``, ``check_integrity()``, ``num_states``,
    ``num_transitions``, ``num_tokens``. Token arrays are 1-D contiguous int32 numpy arrays or CPU
    torch tensors, read in place; other dtypes/layouts raise TypeError/ValueError. Counts are a
    plain array updated along each new state's suffix-link path (3-4 states on natural text) until
    a path longer than ``walk_limit`` states (repetitive text) moves them, once, into a link-cut
    forest with O(log n) amortised updates; ``counts_linked`` says which holds them.

``build_suffix_draft(sources, budget, min_match_len=1, min_prob=0.05, max_depth=32, depth_factor=4.0,
count_prior=0.0, calibration=None, cache="request", features=False)``
    Best-first draft tree over ``[(automaton, match_length, match_state), ...]``; returns
    ``(tokens int64[n], parents int32[n], probs float32[n])``; ``count_prior`` is a pseudo-count
    added to every continuation total. With a ``MatchCalibration`` every conditional is the
    calibrated one of its cell (``cache``: ``"request"``, ``"global"`` or ``"pooled"``);
    ``features=True`` also returns ``(cells int32[n], raws float32[n], ctx_lens int32[n])``: each
    node's calibration cell, its raw frequency and the context length it was counted under.

``MatchCalibration(prior_weight=4.0, max_weight=4096.0)``
    Per-cell ratios ``(accepted + prior) / (predicted + prior)`` over (cache, matched context
    length, evidence, share) cells; ``observe(tokens, parents, cells, raws, committed)`` scores a
    draft against the tokens committed after it; ``ratios()``, ``predicted``, ``accepted``,
    ``tested``; ``MatchCalibration.cell(cache, ctx_len, count, total)``.
"""

from .._ext import load

SuffixAutomaton = load().SuffixAutomaton
build_suffix_draft = load().build_suffix_draft
MatchCalibration = load().MatchCalibration

__all__ = ["MatchCalibration", "SuffixAutomaton", "build_suffix_draft"]
