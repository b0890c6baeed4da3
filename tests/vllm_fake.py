"""A fake engine that calls a drafter exactly as vLLM 0.32's V1 runner calls a ``custom_class`` proposer.

What it replays (vllm/v1/worker/gpu_model_runner.py, gpu_input_batch.py; docs/vllm.md): a persistent
``token_ids_cpu [max_rows, max_len]`` int32 matrix and ``num_tokens_no_spec [max_rows]``; after each
step's bookkeeping the sampled tokens are already written into the rows, and the drafter gets
``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` with one (possibly empty) list per
row. Rows are condensed when requests leave (the last row moves into the hole), rows are swapped,
a new request may take a freed row, a preempted or unscheduled request leaves the batch and comes
back later with all its tokens, a chunked prefill first shows the whole prompt with nothing sampled,
and the drafter call is sometimes skipped (vLLM skips it near max_model_len). Verification is
greedy against a deterministic toy "model": a draft token is accepted while it equals the model's
next token, then the model's own token is appended.

The truth (which request each row holds, and its committed tokens) is kept beside, so a test can
check that a drafter saw exactly what was committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def model_next(tokens: list[int], vocab: int) -> int:
    """The toy target's greedy next token: repeats phrases often, so lookup drafts get accepted."""
    if len(tokens) >= 6 and (tokens[-1] * 7 + tokens[-3]) % 5 != 0:
        return tokens[-6]
    return (tokens[-1] * 31 + len(tokens) * 17 + 3) % vocab


@dataclass
class FakeRequest:
    rid: int
    tokens: list[int]
    prompt_len: int
    max_new: int
    prefill_chunks: int = 1  # steps of prefill before the first sampled token
    draft: list[int] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return len(self.tokens) - self.prompt_len >= self.max_new


class FakeEngine:
    """Drives ``drafter.propose`` like vLLM's runner (see the module docstring).

    Args:
        max_rows / max_len: the persistent batch's shape. vocab: token ids in [0, vocab).
        k: draft tokens verified per step (num_speculative_tokens). seed: all randomness.
        duplicate_prompts: let new requests reuse an earlier prompt (identical-content requests).
    """

    def __init__(self, *, max_rows=6, max_len=400, vocab=50, k=3, seed=0, duplicate_prompts=False,
                 p_preempt=0.05, p_swap=0.1, p_skip=0.03):
        self.rng = np.random.default_rng(seed)
        self.max_rows, self.max_len, self.vocab, self.k = max_rows, max_len, vocab, k
        self.token_ids = np.zeros((max_rows, max_len), dtype=np.int32)
        self.num_tokens = np.zeros(max_rows, dtype=np.int32)
        self.rows: list[FakeRequest] = []
        self.waiting: list[FakeRequest] = []  # preempted / unscheduled, will come back
        self.finished: list[FakeRequest] = []
        self.next_rid = 0
        self.duplicate_prompts = duplicate_prompts
        self.prompts: list[list[int]] = []
        self.p_preempt, self.p_swap, self.p_skip = p_preempt, p_swap, p_skip
        self.drafted = 0
        self.accepted = 0

    # ---------------------------------------------------------------- batch surgery (InputBatch)
    def _write_row(self, i: int, req: FakeRequest) -> None:
        self.token_ids[i, : len(req.tokens)] = req.tokens
        self.token_ids[i, len(req.tokens) :] = self.rng.integers(0, self.vocab, self.max_len - len(req.tokens))
        self.num_tokens[i] = len(req.tokens)

    def _remove(self, i: int) -> FakeRequest:
        """Remove row i and condense: the last row moves into the hole (InputBatch.condense)."""
        req = self.rows[i]
        last = len(self.rows) - 1
        if i != last:
            self.rows[i] = self.rows[last]
            self.token_ids[i] = self.token_ids[last]
            self.num_tokens[i] = self.num_tokens[last]
        self.rows.pop()
        self.token_ids[last] = self.rng.integers(0, self.vocab, self.max_len)  # stale garbage
        return req

    def _new_request(self) -> FakeRequest:
        if self.duplicate_prompts and self.prompts and self.rng.random() < 0.5:
            prompt = list(self.prompts[int(self.rng.integers(len(self.prompts)))])
        else:
            base = self.rng.integers(0, self.vocab, int(self.rng.integers(3, 30))).tolist()
            prompt = base + base[: int(self.rng.integers(0, len(base)))]  # some self-repetition
            self.prompts.append(prompt)
        req = FakeRequest(self.next_rid, list(prompt), len(prompt), int(self.rng.integers(1, 60)),
                          prefill_chunks=1 + int(self.rng.random() < 0.3))
        self.next_rid += 1
        return req

    def _schedule(self) -> None:
        for i in reversed(range(len(self.rows))):
            if self.rows[i].done:
                self.finished.append(self._remove(i))
            elif self.rng.random() < self.p_preempt:
                req = self._remove(i)
                req.draft = list(req.draft)  # the scheduler keeps its spec tokens
                req.prefill_chunks = 1 + int(self.rng.random() < 0.5)  # recompute, maybe chunked
                self.waiting.append(req)
        while len(self.rows) < self.max_rows and (self.waiting or self.rng.random() < 0.7):
            if self.waiting and self.rng.random() < 0.5:
                req = self.waiting.pop(int(self.rng.integers(len(self.waiting))))
            else:
                req = self._new_request()
            self.rows.append(req)
            self._write_row(len(self.rows) - 1, req)
        if len(self.rows) >= 2 and self.rng.random() < self.p_swap:
            a, b = self.rng.choice(len(self.rows), 2, replace=False)
            self.rows[a], self.rows[b] = self.rows[b], self.rows[a]
            self.token_ids[[a, b]] = self.token_ids[[b, a]]
            self.num_tokens[[a, b]] = self.num_tokens[[b, a]]

    # ---------------------------------------------------------------- one step
    def _execute(self) -> list[list[int]]:
        """Run the model on every row; write sampled tokens into the rows (bookkeeping)."""
        sampled: list[list[int]] = []
        for i, req in enumerate(self.rows):
            if req.prefill_chunks > 1:
                req.prefill_chunks -= 1
                req.draft = []
                sampled.append([])  # a partial prefill: discarded, nothing sampled
                continue
            req.prefill_chunks = 0
            out, ctx = [], list(req.tokens)
            draft = req.draft[: self.k]
            for t in draft:
                nxt = model_next(ctx, self.vocab)
                if t != nxt:
                    break
                out.append(t)
                ctx.append(t)
            self.drafted += len(draft)
            self.accepted += len(out)
            out.append(model_next(ctx, self.vocab))
            room = self.max_len - len(req.tokens) - self.k - 1
            out = out[: max(0, min(len(out), room, req.max_new - (len(req.tokens) - req.prompt_len)))]
            req.tokens.extend(out)
            self.token_ids[i, self.num_tokens[i] : self.num_tokens[i] + len(out)] = out
            self.num_tokens[i] += len(out)
            req.draft = []
            sampled.append(out)
        return sampled

    def step(self, drafter) -> tuple[list[list[int]], list[list[int]] | None]:
        """One engine step; returns (sampled per row, the drafter's chains or None when skipped)."""
        self._schedule()
        sampled = self._execute()
        if self.rng.random() < self.p_skip:
            return sampled, None
        chains = drafter.propose(sampled, self.num_tokens, self.token_ids)
        if len(chains) != len(self.rows):
            raise AssertionError(f"drafter returned {len(chains)} rows for a batch of {len(self.rows)}")
        for req, chain in zip(self.rows, chains):
            req.draft = list(chain) if req.prefill_chunks == 0 else []
        return sampled, chains

    def truth(self) -> list[FakeRequest]:
        """The requests in the rows, in row order."""
        return list(self.rows)
