"""A fake engine that calls a drafter exactly as vLLM 0.32's V1 runner calls a ``custom_class`` proposer.

What it replays (vllm/v1/worker/gpu_model_runner.py, gpu_input_batch.py, v1/core/sched/scheduler.py;
docs/vllm.md): a persistent ``token_ids_cpu [max_rows, max_len]`` int32 matrix and
``num_tokens_no_spec [max_rows]``; after each step's bookkeeping the sampled tokens are already
written into the rows, and the drafter gets ``propose(sampled_token_ids, num_tokens_no_spec,
token_ids_cpu, slot_mappings=...)`` with one (possibly empty) list per row.

* Row placement (InputBatch): a request that leaves frees its row; new and returning requests take
  the freed rows, lowest first, then the end of the batch; then ``condense`` moves the last rows
  into the holes still open. Rows are also swapped, and a freed row keeps its stale tokens.
* A preempted request leaves the batch with its drafts cleared (the scheduler empties its
  ``spec_token_ids``) and comes back later with all its tokens, recomputed, maybe in chunks; a
  chunked prefill first shows the whole prompt with nothing sampled.
* The drafter call is skipped when the batch's longest row plus ``k`` no longer fits ``max_len``
  (vLLM's ``input_fits_in_drafter``); vLLM then schedules ``k`` zeros per row, which the next step
  verifies. A request stops at ``max_len`` tokens (``max_model_len``); drafts are trimmed to fit.
* Chains longer than ``k`` or holding ids outside the vocabulary are refused, as vLLM's scheduler
  would fail on them.
* ``p_continue``: a new request may be a conversation's next turn: an earlier request's prompt and
  response, then a new user turn.
* Verification is greedy against a deterministic toy "model": a draft token is accepted while it
  equals the model's next token, then the model's own token is appended.

Not modelled: prompt-embeds rows (a request sent as embeddings leaves its row holding the last
user's tokens; the drafter refuses to start under ``enable_prompt_embeds``, tested directly), KV
slots (``slot_mappings`` is passed but lookup drafting ignores it), and time (tests that need a
clock subclass the engine and add idle gaps).

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

    cap: int = 10**9  # max_model_len: the request stops at this many tokens

    @property
    def done(self) -> bool:
        return len(self.tokens) - self.prompt_len >= self.max_new or len(self.tokens) >= self.cap


class FakeEngine:
    """Drives ``drafter.propose`` like vLLM's runner (see the module docstring).

    Args:
        max_rows / max_len: the persistent batch's shape. vocab: token ids in [0, vocab).
        k: draft tokens verified per step (num_speculative_tokens). seed: all randomness.
        duplicate_prompts: let new requests reuse an earlier prompt (identical-content requests).
        max_new: the most tokens a request generates (each draws 1..max_new); with a small ``max_len``
            requests reach it, and drafter calls are skipped near it.
        p_preempt / p_swap / p_continue: chances per step of a preemption (per row), a row swap, and
            a new request that continues a finished one.
    """

    def __init__(self, *, max_rows=6, max_len=400, vocab=50, k=3, seed=0, duplicate_prompts=False,
                 p_preempt=0.05, p_swap=0.1, p_continue=0.0, max_new=60):
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
        self.p_preempt, self.p_swap, self.p_continue, self.max_new = p_preempt, p_swap, p_continue, max_new
        self.skipped = 0  # drafter calls skipped (near max_len)
        self.continued = 0  # new requests that were a finished request's next turn
        self.drafted = 0
        self.accepted = 0

    # ---------------------------------------------------------------- batch surgery (InputBatch)
    def _write_row(self, i: int, req: FakeRequest) -> None:
        self.token_ids[i, : len(req.tokens)] = req.tokens
        self.token_ids[i, len(req.tokens) :] = self.rng.integers(0, self.vocab, self.max_len - len(req.tokens))
        self.num_tokens[i] = len(req.tokens)

    def _new_request(self) -> FakeRequest:
        earlier = [r for r in self.finished if len(r.tokens) + 12 < self.max_len // 2]
        if earlier and self.rng.random() < self.p_continue:
            last = earlier[int(self.rng.integers(len(earlier)))]
            # a next turn adds at least k + 2 tokens (a chat template's turn markers alone are more)
            turn = self.rng.integers(0, self.vocab, int(self.rng.integers(self.k + 2, self.k + 12))).tolist()
            prompt = list(last.tokens) + turn  # the conversation so far, then the next user turn
            self.continued += 1
        elif self.duplicate_prompts and self.prompts and self.rng.random() < 0.5:
            prompt = list(self.prompts[int(self.rng.integers(len(self.prompts)))])
        else:
            base = self.rng.integers(0, self.vocab, int(self.rng.integers(3, 30))).tolist()
            prompt = base + base[: int(self.rng.integers(0, len(base)))]  # some self-repetition
            self.prompts.append(prompt)
        req = FakeRequest(self.next_rid, list(prompt), len(prompt), int(self.rng.integers(1, self.max_new)),
                          prefill_chunks=1 + int(self.rng.random() < 0.3), cap=self.max_len)
        self.next_rid += 1
        return req

    def _schedule(self) -> None:
        """Free the rows of finished and preempted requests, fill the holes lowest first (then the end),
        condense what is still open (InputBatch.add_request / condense), maybe swap two rows."""
        slots: list[FakeRequest | None] = list(self.rows)
        for i, req in enumerate(slots):
            if req.done:
                self.finished.append(req)
                slots[i] = None
            elif self.rng.random() < self.p_preempt:
                req.draft = []  # the scheduler clears a preempted request's spec tokens
                req.prefill_chunks = 1 + int(self.rng.random() < 0.5)  # recompute, maybe chunked
                self.waiting.append(req)
                slots[i] = None
        while sum(r is not None for r in slots) < self.max_rows and (self.waiting or self.rng.random() < 0.7):
            if self.waiting and self.rng.random() < 0.5:
                req = self.waiting.pop(int(self.rng.integers(len(self.waiting))))
            else:
                req = self._new_request()
            holes = [i for i, r in enumerate(slots) if r is None]
            i = holes[0] if holes else len(slots)
            if i == len(slots):
                slots.append(req)
            else:
                slots[i] = req
            self._write_row(i, req)
        while None in slots:  # condense: the last request moves into the lowest hole
            while slots and slots[-1] is None:
                slots.pop()
            if None not in slots:
                break
            hole, last = slots.index(None), len(slots) - 1
            slots[hole] = slots.pop()
            self.token_ids[hole] = self.token_ids[last]
            self.num_tokens[hole] = self.num_tokens[last]
        self.rows = slots
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
            draft = req.draft[: max(0, min(self.k, self.max_len - len(req.tokens) - 1))]  # trimmed to fit
            for t in draft:
                nxt = model_next(ctx, self.vocab)
                if t != nxt:
                    break
                out.append(t)
                ctx.append(t)
            self.drafted += len(draft)
            self.accepted += len(out)
            out.append(model_next(ctx, self.vocab))
            room = self.max_len - len(req.tokens)
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
        if self.rows and int(self.num_tokens[: len(self.rows)].max()) + self.k > self.max_len:
            self.skipped += 1
            for req in self.rows:  # vLLM schedules k zeros per row in place of a skipped call's drafts
                req.draft = [0] * self.k if req.prefill_chunks == 0 else []
            return sampled, None
        slots = np.arange(int(self.num_tokens[: len(self.rows)].sum()), dtype=np.int64)
        chains = drafter.propose(sampled, self.num_tokens, self.token_ids, slot_mappings=slots)
        if len(chains) != len(self.rows):
            raise AssertionError(f"drafter returned {len(chains)} rows for a batch of {len(self.rows)}")
        for r, chain in enumerate(chains):
            if len(chain) > self.k or any(not 0 <= t < self.vocab for t in chain):
                raise AssertionError(f"row {r}: chain {chain} is longer than k={self.k} or holds ids outside "
                                     f"[0, {self.vocab})")
        for req, chain in zip(self.rows, chains):
            req.draft = list(chain) if req.prefill_chunks == 0 else []
        return sampled, chains

    def truth(self) -> list[FakeRequest]:
        """The requests in the rows, in row order."""
        return list(self.rows)
