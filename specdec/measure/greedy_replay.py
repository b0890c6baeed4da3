"""The one greedy replay loop: a proposer drafts along the target's recorded greedy answer.

Each step accepts the longest draft path matching the recorded continuation and commits it plus the
target's next token: exact for greedy decoding, with no verify forwards. :class:`AnswerReplay` is that
rule for one answer, whoever drafts; :func:`replay_sequence`, :func:`measure_by_replay` (into an
:class:`~specdec.estimate.acceptance.AcceptanceDist`) and the benchmarks' replays all step through it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, NamedTuple, Sequence

from ..estimate.acceptance import AcceptanceDist, from_histogram
from ..sampling.kernels import greedy_replay


def accepted_path(tree, truth: Sequence[int]) -> list[int]:
    """The node ids greedy verification accepts, root first: the longest root path of ``tree`` whose
    tokens are a prefix of ``truth`` (:func:`specdec.sampling.kernels.greedy_replay`)."""
    return greedy_replay(tree.tokens.tolist(), tree.parent_list, truth) if tree.num_nodes else []


@dataclass(frozen=True)
class ReplayStep:
    """One replayed verify step.

    Attributes:
        pos: answer index of the step's first committed token.
        path: the accepted node ids of the verified tree, root first.
        tokens: what was committed: the accepted path's tokens plus the target's next token.
    """

    pos: int
    path: list[int]
    tokens: list[int]

    @property
    def accepted(self) -> int:
        """Accepted drafted tokens (the bonus token not counted)."""
        return len(self.path)


class AnswerReplay:
    """Where a greedy replay stands in one recorded answer (the target's tokens after what the proposer
    was given). Draft from the committed context, pass the tree to :meth:`step`, repeat until
    :attr:`done`: ``commit(pos, tokens)`` gets every answer token exactly once, in order (``pos``: the
    answer index). The answer's last token is never a draft's: it is the target's own, as in the decoder.
    """

    def __init__(self, answer: Sequence[int], commit: Callable[[int, list[int]], None]):
        self.answer = list(answer)
        self.pos = 0
        self._commit = commit

    @property
    def done(self) -> bool:
        return self.pos >= len(self.answer)

    def step(self, tree) -> ReplayStep:
        """Verify ``tree`` (a :class:`~specdec.DraftTree` drafted at :attr:`pos`) greedily against the
        answer, commit the accepted tokens and the target's next one, and advance."""
        if self.done:
            raise ValueError(f"the answer's {len(self.answer)} tokens are all replayed; no step is left")
        rest = self.answer[self.pos :]
        path = accepted_path(tree, rest)[: len(rest) - 1]
        step = ReplayStep(self.pos, path, rest[: len(path) + 1])
        self._commit(self.pos, step.tokens)
        self.pos += len(step.tokens)
        return step


class SequenceReplay(NamedTuple):
    """What :func:`replay_sequence` measured on one sequence."""

    emitted: int  # tokens committed after the prefill's token: accepted drafts + one per step
    steps: int  # verify steps
    propose_s: float  # seconds spent in ``propose``
    accepted: list[int]  # accepted drafted tokens, per step


def replay_sequence(
    proposer,
    tokens: Sequence[int],
    prompt_len: int,
    budget: int,
    *,
    hidden=None,
    req: Hashable = "replay",
) -> SequenceReplay:
    """Greedy replay of ``tokens`` (``prompt_len`` prompt tokens + the greedy continuation, whose first
    token comes from the prefill) through ``proposer`` as the decoder drives it. ``hidden [len(tokens),
    H]`` (teacher-forced) is required by a proposer that reads hidden states, and each commit gets the
    rows the decoder would pass; without it ``target_hidden`` is None throughout."""
    P = prompt_len
    if not 1 <= P < len(tokens):
        raise ValueError(f"prompt_len must be in [1, {len(tokens) - 1}], got {P}")
    if hidden is None and getattr(proposer, "requires_target_hidden", False):
        raise ValueError("this proposer reads target hidden states: pass the sequence's hidden rows")

    def rows(a: int, b: int):
        return None if hidden is None else hidden[a:b]

    proposer.begin(req, list(tokens[:P]), target_hidden=rows(0, P))
    accepted: list[int] = []
    spent = 0.0
    try:
        proposer.commit(req, [tokens[P]], target_hidden=rows(P - 1, P))  # the prefill step's token
        answer = AnswerReplay(
            tokens[P + 1 :], lambda pos, out: proposer.commit(req, out, target_hidden=rows(P + pos, P + pos + len(out)))
        )
        while not answer.done:
            t0 = time.perf_counter()
            tree = proposer.propose([req], budget)[0]
            spent += time.perf_counter() - t0
            accepted.append(answer.step(tree).accepted)
    finally:
        proposer.end(req)
    return SequenceReplay(answer.pos, len(accepted), spent, accepted)


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
        proposer.begin(rid, list(prompt))
        try:
            answer = AnswerReplay(outputs[rid], lambda pos, out, rid=rid: proposer.commit(rid, out))
            while not answer.done:
                t0 = time.perf_counter()
                tree = proposer.propose([rid], budget)[0]
                propose_s += time.perf_counter() - t0
                a = answer.step(tree).accepted
                accepted.append(a)
                drafted.append(max(a, min(tree.num_nodes, budget)))
        finally:
            proposer.end(rid)
    if not accepted:
        raise ValueError("measure_by_replay got no target output tokens to replay")
    return from_histogram(accepted, budget, name, propose_s / len(accepted), drafted)
