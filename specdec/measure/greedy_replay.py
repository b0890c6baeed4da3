"""The one greedy replay loop: a proposer drafts along the target's cached greedy outputs.

Each step accepts the longest draft path matching the recorded continuation and commits it plus the
target's next token: exact for greedy decoding, with no verify forwards. :func:`measure_by_replay`
turns it into an :class:`~specdec.estimate.acceptance.AcceptanceDist`.
"""

from __future__ import annotations

import time
from typing import Hashable, Mapping, Sequence

from ..estimate.acceptance import AcceptanceDist, from_histogram
from ..sampling.kernels import greedy_replay


def greedy_accepted(tree, truth: Sequence[int]) -> int:
    """Drafted tokens greedy verification accepts: the longest root path matching ``truth``
    (:func:`specdec.sampling.kernels.greedy_replay`)."""
    return len(greedy_replay(tree.tokens.tolist(), tree.parent_list, truth)) if tree.num_nodes else 0


def replay_with_hidden(
    proposer, hidden, tokens: Sequence[int], prompt_len: int, budget: int, req: Hashable = "replay"
) -> tuple[int, int, float]:
    """Greedy replay of ``tokens`` (``prompt_len`` prompt tokens + the greedy continuation) through a
    proposer reading ``hidden [len(tokens), H]`` (teacher-forced), committing exactly the rows the
    decoder would. Returns ``(emitted tokens, verify steps, seconds in propose)``."""
    P = prompt_len
    if not 1 <= P < len(tokens):
        raise ValueError(f"prompt_len must be in [1, {len(tokens) - 1}], got {P}")
    proposer.begin(req, list(tokens[:P]), target_hidden=hidden[:P])
    try:
        proposer.commit(req, [tokens[P]], target_hidden=hidden[P - 1 : P])  # the prefill step's token
        c, emitted, steps, spent = P, 0, 0, 0.0
        while c + 1 < len(tokens):
            t0 = time.perf_counter()
            tree = proposer.propose([req], budget)[0]
            spent += time.perf_counter() - t0
            a = min(greedy_accepted(tree, tokens[c + 1 :]), len(tokens) - c - 2)
            out = list(tokens[c + 1 : c + 2 + a])
            proposer.commit(req, out, target_hidden=hidden[c : c + len(out)])
            c += len(out)
            emitted += len(out)
            steps += 1
    finally:
        proposer.end(req)
    return emitted, steps, spent


def measure_by_replay(
    proposer,
    prompts: Mapping[Hashable, Sequence[int]],
    outputs: Mapping[Hashable, Sequence[int]],
    budget: int,
    name: str = "",
) -> AcceptanceDist:
    """Acceptance histogram of ``proposer`` on the target's greedy ``outputs`` (see module docstring).

    ``proposer``: a Proposer not needing hidden states; ``prompts`` / ``outputs``: request id -> prompt
    ids / greedy continuation; ``budget``: nodes per step (``budget + 1`` bins).
    """
    if getattr(proposer, "requires_target_hidden", False):
        raise ValueError(
            f"proposer {getattr(proposer, 'artifact', None)} needs target hidden states; "
            "measure it with the SpeculativeDecoder's metrics instead of replay"
        )
    if budget < 1:
        raise ValueError(f"measure_by_replay budget must be >= 1, got {budget}")
    missing = set(prompts) - set(outputs)
    if missing:
        raise ValueError(f"no target output for requests {sorted(map(str, missing))[:5]}")
    accepted: list[int] = []
    drafted: list[int] = []
    propose_s = 0.0
    for rid, prompt in prompts.items():
        out = list(outputs[rid])
        proposer.begin(rid, list(prompt))
        try:
            pos = 0
            while pos < len(out):
                t0 = time.perf_counter()
                tree = proposer.propose([rid], budget)[0]
                propose_s += time.perf_counter() - t0
                a = min(greedy_accepted(tree, out[pos:]), len(out) - pos - 1)
                accepted.append(a)
                drafted.append(max(a, min(tree.num_nodes, budget)))
                proposer.commit(rid, out[pos : pos + a + 1])
                pos += a + 1
        finally:
            proposer.end(rid)
    if not accepted:
        raise ValueError("measure_by_replay got no target output tokens to replay")
    return from_histogram(accepted, budget, name, propose_s / len(accepted), drafted)
