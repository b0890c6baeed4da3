"""Calibrating the simulator from an engine (vLLM) seen from outside: streamed chunks and counters.

A plan needs the engine's own step times, which cannot be timed inside it without patching; a server
streams one chunk per request per step, so chunk gaps are step times, and its speculative counters give
the acceptance histogram. Bursts (:func:`decode_sample`) or any trace under load (:func:`trace_samples`);
the HTTP side is in benchmarks/vllm/plan_vs_measured.py.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from ...estimate.acceptance import AcceptanceDist
from ...estimate.step_cost import Sample, StepCostModel, StepSample, packed_features


def together_gaps(chunk_times: Sequence[Sequence[float]]) -> list[float]:
    """Chunk gaps of each request while every request was decoding (from the last first chunk to the
    first last chunk): steps of exactly ``len(chunk_times)`` rows. ``chunk_times[i]``: request ``i``'s
    ascending arrival times (seconds, one clock). ValueError when the window holds no gap."""
    if not chunk_times or any(len(c) < 2 for c in chunk_times):
        raise ValueError("together_gaps needs at least two chunk times per request")
    if any(np.any(np.diff(np.asarray(c, dtype=np.float64)) < 0) for c in chunk_times):
        raise ValueError("chunk times must be ascending per request")
    start = max(c[0] for c in chunk_times)
    end = min(c[-1] for c in chunk_times)
    gaps = [b - a for c in chunk_times for a, b in zip(c[:-1], c[1:]) if a >= start and b <= end]
    if not gaps:
        raise ValueError(f"no step had all {len(chunk_times)} requests decoding (window {start:.3f}..{end:.3f} s)")
    return gaps


def decode_sample(chunk_times: Sequence[Sequence[float]], context: float, *, row_steps: int = 0, drafts: int = 0,
                  draft_tokens: int = 0) -> Sample:
    """One cost sample from a burst of requests that decoded together.

    ``chunk_times``: as :func:`together_gaps`; ``context``: mean cached tokens per row; ``row_steps``
    (emitted - accepted drafts - one first token per request), ``drafts`` and ``draft_tokens`` set the
    mean row's tokens. Returns ``Sample(batch, tokens, context, seconds = mean gap, multi_rows)``.
    """
    b = len(chunk_times)
    if drafts < 0 or draft_tokens < drafts or row_steps < 0 or (drafts and not row_steps) or drafts > row_steps:
        raise ValueError(f"inconsistent counters: row_steps={row_steps}, drafts={drafts}, draft_tokens={draft_tokens}")
    gaps = together_gaps(chunk_times)
    per_row = draft_tokens / row_steps if row_steps else 0.0
    multi = b * drafts / row_steps if row_steps else 0.0
    return Sample(b, 1.0 + per_row, float(context), float(np.mean(gaps)), multi)


def acceptance_from_counters(row_steps: int, drafts: int, draft_tokens: int, accepted_per_pos: Sequence[int], *,
                             name: str = "", propose_s_per_req: float = 0.0) -> AcceptanceDist:
    """A chain drafter's per-row-step histogram from engine counters: ``row_steps`` (all decode
    row-steps), ``drafts`` (those with a draft), ``draft_tokens`` and ``accepted_per_pos [k]``
    (non-increasing; ``j``: row-steps accepting at least ``j + 1``). Draft lengths are not exported,
    so ``drafted`` spreads drafts over the two lengths around their mean."""
    acc = np.asarray(accepted_per_pos, dtype=np.float64)
    k = acc.size
    if k < 1:
        raise ValueError("accepted_per_pos needs one entry per draft position (k >= 1)")
    if np.any(np.diff(acc) > 0) or np.any(acc < 0):
        raise ValueError(f"accepted_per_pos must be non-negative and non-increasing (a chain), got {acc.tolist()}")
    if not (0 <= drafts <= row_steps and row_steps > 0) or acc[0] > drafts:
        raise ValueError(f"need 0 <= accepted[0] <= drafts <= row_steps and row_steps > 0, got accepted "
                         f"{acc.tolist()}, drafts {drafts}, row_steps {row_steps}")
    if not drafts <= draft_tokens <= k * drafts:
        raise ValueError(f"draft_tokens {draft_tokens} must lie in [drafts, k x drafts] = [{drafts}, {k * drafts}]")
    counts = np.empty(k + 1)
    counts[0] = row_steps - acc[0]
    counts[1:k] = acc[:-1] - acc[1:]
    counts[k] = acc[-1]
    drafted = np.zeros(k + 1)
    drafted[0] = row_steps - drafts
    if drafts:
        mean = draft_tokens / drafts
        lo = int(np.floor(mean))
        hi_share = mean - lo
        drafted[lo] += drafts * (1.0 - hi_share)
        if hi_share > 0:
            drafted[lo + 1] += drafts * hi_share
    return AcceptanceDist(counts, propose_s_per_req=propose_s_per_req, name=name, drafted=drafted)


@dataclasses.dataclass(frozen=True)
class Stream:
    """One request as the client saw it: when it was sent, its prompt length, each chunk's time."""

    sent: float
    prompt_len: int
    chunk_times: Sequence[float]


def cluster_steps(streams: Sequence[Stream], gap: float) -> list[list[tuple[int, int]]]:
    """Chunks grouped into engine steps (``[(stream, chunk), ...]`` per step, in time order): chained
    chunks within ``gap`` seconds; a larger gap, or a second chunk of the same request, starts a step."""
    if not gap > 0:
        raise ValueError(f"gap must be > 0 seconds, got {gap}")
    events = sorted((t, i, j) for i, s in enumerate(streams) for j, t in enumerate(s.chunk_times))
    steps: list[list[tuple[int, int]]] = []
    members: set[int] = set()
    last = -np.inf
    for t, i, j in events:
        if t - last > gap or i in members:
            steps.append([])
            members = set()
        steps[-1].append((i, j))
        members.add(i)
        last = t
    return steps


SHORT = 0.3  # an interval under this fraction of the run's median is no step time


def engine_steps(streams: Sequence[Stream], gap: float) -> tuple[list[list[tuple[int, int]]], list[float], set[int]]:
    """The engine's steps as the client saw them: ``(steps, at, untimed)``.

    ``steps`` as :func:`cluster_steps`, except that two clusters in a row with no request in common
    and under ``SHORT`` x the run's median interval apart are one step whose chunks the client read
    in two groups (a loaded client can spread one step's chunks past ``gap``), merged. ``at[k]``:
    step ``k``'s earliest chunk. ``untimed``: the steps whose interval from the one before is no
    step time: under ``SHORT`` x the median (a client that fell behind read a step late and the
    next on time), and the step before each (its interval ran long)."""
    steps = cluster_steps(streams, gap)
    at = [min(streams[i].chunk_times[j] for i, j in step) for step in steps]
    if len(steps) < 2:
        return steps, at, set()
    short = SHORT * float(np.median(np.diff(at)))
    merged, merged_at = [steps[0]], [at[0]]
    for step, t in zip(steps[1:], at[1:]):
        if t - merged_at[-1] < short and not {i for i, _ in merged[-1]} & {i for i, _ in step}:
            merged[-1] = merged[-1] + step
        else:
            merged.append(step)
            merged_at.append(t)
    late = {k for k in range(1, len(merged)) if merged_at[k] - merged_at[k - 1] < short}
    return merged, merged_at, late | {k - 1 for k in late}


@dataclasses.dataclass(frozen=True)
class Engine:
    """The server settings every candidate shares (from the serve command or the user)."""

    max_num_seqs: int
    max_batched_tokens: int

    def __post_init__(self):
        if self.max_num_seqs < 1 or self.max_batched_tokens < 1:
            raise ValueError(f"max_num_seqs and max_batched_tokens must be >= 1, got {self}")


def prefill_chunks(streams: Sequence[Stream], steps: Sequence[Sequence[tuple[int, int]]], at: Sequence[float],
                   engine: Engine | None, row_tokens: float = 1.0) -> list[list[tuple[int, int, int]]]:
    """Per step of :func:`engine_steps`, the prompt pieces it computed: ``[(stream, new tokens, tokens
    of that prompt computed before)]``. The client sees a prompt only where its first token streams,
    but a chunking scheduler may have computed most of it in earlier steps. Without ``engine``: whole
    there. With it vLLM V1's scheduler is replayed: decode rows take ``row_tokens`` each of
    ``max_batched_tokens``, then prompts sent before the step began take the rest first come first
    served (a new one while under ``max_num_seqs``), cut only where the budget runs out (one that fit
    yet did not finish had not reached the engine); a prompt finishes where its first token streams."""
    out: list[list[tuple[int, int, int]]] = [[] for _ in steps]
    first = {i: k for k, step in enumerate(steps) for i, j in step if j == 0}
    if engine is None:
        for i, k in first.items():
            out[k].append((i, streams[i].prompt_len, 0))
        return out
    order = sorted(first, key=lambda i: (streams[i].sent, i))
    done = dict.fromkeys(first, 0)
    for k, step in enumerate(steps):
        decoding = sum(1 for _, j in step if j > 0)
        left = engine.max_batched_tokens - row_tokens * decoding
        for i in order:
            if first[i] == k:
                out[k].append((i, streams[i].prompt_len - done[i], done[i]))
                left -= streams[i].prompt_len - done[i]
        running = decoding + sum(1 for i in order if first[i] > k and done[i] > 0) + len(out[k])
        for i in order:
            if k == 0 or streams[i].sent > at[k - 1] or left < 1:
                break
            if first[i] <= k:
                continue
            if (not done[i] and running >= engine.max_num_seqs) or streams[i].prompt_len - done[i] <= left:
                break  # not admitted yet; or not in the engine yet, which would have completed the prompt here
            running += not done[i]
            out[k].append((i, int(left), done[i]))
            done[i] += int(left)
            left -= int(left)
    return out


def trace_samples(streams: Sequence[Stream], *, gap: float = 0.012, draft_share: float = 0.0,
                  draft_len: float = 0.0, tokens_per_chunk: Sequence[float] | None = None,
                  decode_only: bool = False, engine: Engine | None = None) -> list[StepSample]:
    """Cost samples of an engine's steps reconstructed from the client's ``streams``.

    Args:
        gap: the largest spread of one step's chunk times at the client (seconds).
        draft_share: drafts / decode row-steps of the run; ``draft_len``: drafted tokens / drafts.
        tokens_per_chunk: per stream, mean tokens a chunk carried (default 1).
        decode_only: leave out every step that computed part of a prompt.
        engine: the server's limits, which place prompt chunks (:func:`prefill_chunks`).

    Returns:
        One :class:`StepSample` per step of :func:`engine_steps` preceded by a busy step (its ``untimed``
        steps left out), and one per prefill of a request sent into an empty system. A decode row costs
        ``(1 - s) x`` a one-token row plus ``s x`` a ``1 + draft_len``-token row; a prompt chunk is a
        piece (an interval with no decode row holds as many steps as its chunks need).
    """
    if not 0.0 <= draft_share <= 1.0 or draft_len < 0 or (draft_share > 0 and draft_len < 1):
        raise ValueError(f"need draft_share in [0, 1] and draft_len >= 1 when drafting, got {draft_share}, {draft_len}")
    tpc = [1.0] * len(streams) if tokens_per_chunk is None else list(tokens_per_chunk)
    if len(tpc) != len(streams):
        raise ValueError("tokens_per_chunk needs one entry per stream")
    for s in streams:
        if len(s.chunk_times) < 1 or s.chunk_times[0] < s.sent:
            raise ValueError("every stream needs a first chunk at or after its send time")
    steps, at, skip = engine_steps(streams, gap)  # on relative error one near-zero interval would outweigh all others
    chunks = prefill_chunks(streams, steps, at, engine, 1.0 + draft_share * draft_len)
    out: list[StepSample] = []
    for k, step in enumerate(steps):
        if k in skip or (decode_only and chunks[k]):
            continue
        if k > 0 and busy_between(streams, at[k - 1], at[k]):
            seconds = at[k] - at[k - 1]
        elif len(step) == 1 and step[0][1] == 0 and _alone(streams, step[0][0]):
            s = streams[step[0][0]]
            seconds = s.chunk_times[0] - s.sent
        else:
            continue  # the step after an idle gap: its start is not seen
        pieces = [(float(n), float(c)) for _, n, c in chunks[k]]
        weights = [1.0] * len(pieces)
        for i, j in step:
            if j == 0:
                continue
            ctx = streams[i].prompt_len + j * tpc[i]
            pieces += [(1, ctx), (1 + draft_len, ctx)] if draft_share > 0 else [(1, ctx)]
            weights += [1.0 - draft_share, draft_share] if draft_share > 0 else [1.0]
        terms = packed_features(pieces, weights)
        if engine is not None and len(pieces) == len(chunks[k]):
            terms[0] = max(1.0, math.ceil(sum(n for _, n, _ in chunks[k]) / engine.max_batched_tokens))
        out.append(StepSample(tuple(terms.tolist()), seconds))
    return out


def fit_trace(samples: Sequence[Sample | StepSample], meta: dict | None = None) -> StepCostModel:
    """The step-cost model of an engine's steps (:func:`trace_samples`), fitted ``by_time``
    (:meth:`~specdec.estimate.step_cost.StepCostModel.fit`): a served trace is mostly short decode
    steps, but at a long-prompt pool's knee its few prefills hold most of the server's time, and a
    fit weighing each step alike lets the many short steps set the prefills' cost
    (docs/vllm-plan-runs.md measures the difference)."""
    return StepCostModel.fit(samples, meta, by_time=True)


def busy_between(streams: Sequence[Stream], t0: float, t1: float) -> bool:
    """Some request was in the system from ``t0`` to ``t1``: sent by ``t0`` and not done before ``t1``."""
    return any(s.sent <= t0 and s.chunk_times[-1] >= t1 for s in streams)


def _alone(streams: Sequence[Stream], i: int) -> bool:
    """Request ``i`` was the only one in the system from its send to its first chunk."""
    s = streams[i]
    return not any(k != i and o.sent <= s.chunk_times[0] and o.chunk_times[-1] >= s.sent
                   for k, o in enumerate(streams))
