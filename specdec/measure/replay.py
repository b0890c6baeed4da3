"""The one greedy replay loop: a proposer drafts along the target's recorded greedy answer.

Under greedy verification the target emits its greedy continuation whatever the draft, so a step
accepts the longest tree path matching that continuation plus one bonus token: replaying the
recorded answer through ``propose``/``commit`` gives exactly the decoder's tokens per step, without
the target's verify forwards.

:class:`AnswerReplay` is that rule and its bookkeeping for one answer, whoever drafts: every replay
(:func:`replay_sequence`, :func:`measure_by_replay` and the benchmarks' replays of sized, scored or
chain drafts) steps through it. :func:`measure_by_replay` turns replays into an
:class:`~specdec.estimate.acceptance.AcceptanceDist`.
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
    """Where a greedy replay stands in one recorded answer, and the rule of its steps.

    ``answer`` holds the target's greedy tokens after what the proposer was already given;
    ``commit(pos, tokens)`` hands each step's committed tokens on (to the proposer, with whatever
    rows it needs; ``pos`` is their answer index). Draft a tree from the committed context, pass it
    to :meth:`step`, and repeat until :attr:`done`: every answer token is committed exactly once.
    The answer's last token is never accepted from a draft: it is the target's own token of the
    last step (what the decoder emits for a finished request).
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
    """Greedy replay of one recorded sequence through ``proposer``, as the decoder would drive it.

    ``tokens`` is the prompt (``prompt_len`` tokens) followed by the target's greedy continuation;
    its first continuation token comes from the prefill, so it is committed before the first draft.
    ``hidden [len(tokens), H]``, the target's teacher-forced hidden states at those positions, is
    required by a proposer that reads them (``requires_target_hidden``): each commit gets the rows
    the decoder would pass (row ``j`` is the state of the token that produced ``accepted_ids[j]``).
    Without ``hidden``, ``target_hidden`` is None throughout.
    """
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

    Args:
        proposer: any object following the Proposer protocol (must not need target hidden states;
            such proposers are measured through the decoder instead).
        prompts: request id -> prompt token ids.
        outputs: request id -> the target's greedy continuation of that prompt.
        budget: draft budget (tree nodes) per step; the histogram has ``budget + 1`` bins.
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
