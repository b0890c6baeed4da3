"""``SuffixAutomaton`` and ``build_suffix_draft``: the C++ suffix automaton, re-exported.

C++ (``csrc/suffix/``) so the hot path makes no per-token Python calls. Token arrays are 1-D
contiguous int32 numpy arrays or CPU tensors, read in place (else TypeError/ValueError).

``SuffixAutomaton(vocab_size, walk_limit=64)``: ``extend``, ``add_document`` (separator-terminated),
``longest_match(context)`` / ``repeat_match()`` -> ``(length, state)``, ``advance(length, state, tokens)``,
``count(state)`` (exact), ``transitions(state) -> (tokens, targets, counts)``, ``state_len``,
``state_link``, ``memory_bytes()``, ``check_integrity()``, ``num_states`` / ``num_transitions`` /
``num_tokens``; counts move once into a link-cut forest after a suffix-link path over ``walk_limit``
(``counts_linked``).

``build_suffix_draft(sources, budget, min_match_len=1, min_prob=0.05, max_depth=32, depth_factor=4.0,
count_prior=0.0, calibration=None, cache="request", features=False)``: best-first tree over
``[(automaton, length, state), ...]`` -> ``(tokens int64[n], parents int32[n], probs float32[n])``, with a
``MatchCalibration`` applied per cell; ``features=True`` adds ``(cells int32, raws float32, ctx_lens int32)``.

``MatchCalibration(prior_weight=4.0, max_weight=4096.0)``: per-cell ratios ``(accepted + prior) /
(predicted + prior)``; ``observe(tokens, parents, cells, raws, committed)``, ``ratios()``,
``predicted``, ``accepted``, ``tested``, ``cell(cache, ctx_len, count, total)``.
"""

from .._ext import load

SuffixAutomaton = load().SuffixAutomaton
build_suffix_draft = load().build_suffix_draft
MatchCalibration = load().MatchCalibration

__all__ = ["MatchCalibration", "SuffixAutomaton", "build_suffix_draft"]
