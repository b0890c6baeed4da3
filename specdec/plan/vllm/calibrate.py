"""A measured run (:class:`~.measure.PoolRun`) turned into the simulator's inputs: the pool's requests
(prompt, output length, category), step costs (steps rebuilt from chunk times by
:mod:`.engine_trace` and fitted by :class:`StepCostModel`), acceptance from vLLM's counters, and per
batch size the decode-only steps :mod:`.schedule` reads; a burst after it adds the batch sizes
its arrivals did not reach (:func:`with_bursts`). Decode row-steps are counted from chunks
and from usage minus accepted drafts; a chunk may merge two steps' output and vLLM counts drafts
accepted past ``max_tokens``, so each undercounts and the larger is kept."""

from __future__ import annotations

import dataclasses
import statistics
from typing import Sequence

from ...estimate.acceptance import AcceptanceDist
from ...estimate.step_cost import StepCostModel
from .engine_trace import (Engine, Stream, acceptance_from_counters, busy_between, engine_steps, fit_trace,
                           prefill_chunks, trace_samples)
from ..workload import WorkloadItem
from .measure import MeasurementError, PoolRun

DEFAULT_GAP = 0.012  # seconds: the widest spread of one step's chunks at the client


@dataclasses.dataclass
class Calibration:
    """One candidate's simulator inputs on one pool: ``items`` (the requests as measured), ``cost`` (the
    fitted step-time model), ``acceptance`` (None without speculation), ``per_batch`` (``{rows:
    [(seconds, tokens per row), ...]}`` of decode-only steps), and the decode ``row_steps`` with vLLM's
    ``drafts`` and ``draft_tokens``."""

    items: list[WorkloadItem]
    cost: StepCostModel
    acceptance: AcceptanceDist | None
    per_batch: dict[int, list[tuple[float, float]]]
    row_steps: int
    drafts: float
    draft_tokens: float

    @property
    def accepted_per_row_step(self) -> float:
        a = self.acceptance
        return 0.0 if a is None else a.expected_accepted(a.max_budget)

    @property
    def accepted_per_draft(self) -> float:
        """Accepted tokens per row-step that carried a draft."""
        a = self.acceptance
        return 0.0 if a is None or not self.drafts else a.expected_accepted(a.max_budget) * self.row_steps / self.drafts

    def step_at(self, rows: int, min_steps: int = 3) -> tuple[float, float] | None:
        """Median ``(seconds, tokens per row)`` of the decode steps of ``rows`` rows (None: fewer than
        ``min_steps`` seen)."""
        got = self.per_batch.get(rows, [])
        if len(got) < min_steps:
            return None
        return statistics.median(s for s, _ in got), statistics.fmean(t for _, t in got)

    def step_seconds(self, min_steps: int = 3) -> dict[int, float]:
        """``{rows: median seconds}`` of the decode steps of every batch size seen at least ``min_steps``
        times: how fast this engine runs a step, as the review compares it."""
        return {rows: at[0] for rows in self.per_batch if (at := self.step_at(rows, min_steps)) is not None}


def row_steps_of(run: PoolRun) -> int:
    by_chunks = sum(len(s.chunk_times) - 1 for s in run.streams)
    by_tokens = sum(s.tokens for s in run.streams) - run.counters.accepted - len(run.streams)
    return max(1, int(round(max(by_chunks, by_tokens))))


def decode_steps(run: PoolRun, gap: float, engine: Engine | None = None) -> dict[int, list[tuple[float, float]]]:
    """``{rows: [(seconds, tokens per row)]}``: the :func:`~.engine_trace.engine_steps` that computed no
    prompt (:func:`~.engine_trace.prefill_chunks`), each timed from the step before it while a request
    was in the system throughout (its ``untimed`` steps left out)."""
    streams = run.streams
    trace = [Stream(s.sent, s.prompt_tokens or 1, s.chunk_times) for s in streams]
    steps, at, untimed = engine_steps(trace, gap)
    _, share, length = _drafting(run)
    chunks = prefill_chunks(trace, steps, at, engine, 1.0 + share * length)
    out: dict[int, list[tuple[float, float]]] = {}
    for k in range(1, len(steps)):
        step = steps[k]
        if k in untimed or chunks[k] or not busy_between(trace, at[k - 1], at[k]):
            continue
        tokens = sum(streams[i].chunk_tokens[j] for i, j in step) / len(step)
        out.setdefault(len(step), []).append((at[k] - at[k - 1], tokens))
    return dict(sorted(out.items()))


def _drafting(run: PoolRun) -> tuple[int, float, float]:
    """``(decode row-steps, drafts per row-step, drafted tokens per draft)`` from a run's chunks and
    counters (0, 0 without drafts); the counters are clipped to what a chain of their length allows."""
    rows = row_steps_of(run)
    c = run.counters
    if not (c.speculating and c.drafts > 0):
        return rows, 0.0, 0.0
    drafts = int(round(c.drafts))
    rows = max(rows, drafts)
    tokens = min(max(int(round(c.draft_tokens)), drafts), drafts * len(c.per_pos))
    return rows, drafts / rows, tokens / drafts


def _samples(run: PoolRun, gap: float, share: float, length: float, engine: Engine | None, *,
             decode_only: bool = False) -> list:
    """The run's engine steps as step-cost samples (:func:`~.engine_trace.trace_samples`)."""
    streams = [Stream(s.sent, int(s.prompt_tokens or 1), s.chunk_times) for s in run.streams]
    return trace_samples(streams, gap=gap, draft_share=share, draft_len=length, decode_only=decode_only,
                         tokens_per_chunk=[s.tokens / len(s.chunk_times) for s in run.streams], engine=engine)


def run_samples(run: PoolRun, gap: float = DEFAULT_GAP, *, decode_only: bool = False,
                engine: Engine | None = None) -> list:
    """The run's engine steps as step-cost samples, each decode row drafting as the run's own counters
    say (``decode_only``: the steps that computed no prompt; ``engine``: see :func:`~.engine_trace.prefill_chunks`)."""
    _, share, length = _drafting(run)
    return _samples(run, gap, share, length, engine, decode_only=decode_only)


def calibrate(run: PoolRun, *, gap: float = DEFAULT_GAP, engine: Engine | None = None) -> Calibration:
    """The simulator's inputs from one measured run on a server with ``engine``'s limits. MeasurementError
    for a stream without usage counts, or too few engine steps to fit step costs."""
    missing = [i for i, s in enumerate(run.streams) if not s.prompt_tokens]
    if missing:
        raise MeasurementError(f"{run.candidate} on pool {run.pool!r}: the server sent no prompt token count for "
                               f"request {missing[0]} (usage)")
    items = [WorkloadItem(int(s.prompt_tokens), max(1, s.tokens), cat) for s, cat in zip(run.streams, run.categories)]
    rows, share, length = _drafting(run)
    c = run.counters
    acceptance = None
    if share > 0:
        drafts = int(round(c.drafts))
        per_pos = [min(p, drafts) for p in c.per_pos]
        for j in range(1, len(per_pos)):  # a chain is accepted as a prefix: counts never rise with position
            per_pos[j] = min(per_pos[j], per_pos[j - 1])
        acceptance = acceptance_from_counters(rows, drafts, int(round(length * drafts)), per_pos,
                                              name=f"{run.candidate}/{run.pool}")
    elif c.speculating:  # a speculating server that never drafted: every row-step accepted nothing
        acceptance = AcceptanceDist([float(rows)] + [0.0] * len(c.per_pos), name=f"{run.candidate}/{run.pool}",
                                    drafted=[float(rows)] + [0.0] * len(c.per_pos))
    samples = _samples(run, gap, share, length, engine)
    if len(samples) < 7:
        raise MeasurementError(f"{run.candidate} on pool {run.pool!r}: only {len(samples)} engine steps could be "
                               "timed (the step-cost fit needs 7); send more requests per pool")
    cost = fit_trace(samples, meta={"candidate": run.candidate, "pool": run.pool, "engine": "vllm",
                                    "vllm_version": run.vllm_version, "load_average": list(run.load_average)})
    return Calibration(items, cost, acceptance, decode_steps(run, gap, engine), rows, c.drafts, c.draft_tokens)


def with_bursts(cal: Calibration, bursts: Sequence[PoolRun], *, gap: float = DEFAULT_GAP,
                fit: bool = True, engine: Engine | None = None) -> Calibration:
    """``cal`` with what ``bursts`` (:func:`~.measure.measure_burst`, each run on the same server after
    the measurement) add: their decode step times in ``per_batch``, and with ``fit`` their decode
    steps in the step-cost fit, each burst's drafting read from its own counters; unchanged without
    a burst.

    A ramp kept under the pool's knee fits step costs at a few rows; the bursts' steps are where an
    overload is predicted (docs/vllm-plan-runs.md measures the difference). Steps that computed a
    prompt are not fitted, and the acceptance stays the measurement's: a burst repeats the
    measurement's prompts, so the prefix cache shortens its prefills and a drafter that caches
    earlier responses (suffix decoding) accepts more there. So each burst step of ``B`` rows carries
    the lesser of its burst's mean tokens per row at ``B`` (too high where responses are cached) and
    ``cal``'s mean per decode row-step (too high for a drafter that drafts less under load, as the
    cost gate does). ``fit=False`` for a batch-size table, which drafts at some sizes only, which
    one mean from its counters cannot place."""
    if not bursts:
        return cal
    ramp = 1.0 + cal.accepted_per_row_step
    per_batch = {rows: list(steps) for rows, steps in cal.per_batch.items()}
    extra = []
    for burst in bursts:
        for rows, steps in decode_steps(burst, gap, engine).items():
            tokens = min(ramp, statistics.fmean(t for _, t in steps))
            per_batch.setdefault(rows, []).extend((seconds, tokens) for seconds, _ in steps)
        if fit:
            extra += run_samples(burst, gap, decode_only=True, engine=engine)
    cost = cal.cost
    if extra:
        cost = fit_trace(list(cal.cost.samples) + extra, meta={**cal.cost.meta, "burst_steps": len(extra)})
    return dataclasses.replace(cal, cost=cost, per_batch=dict(sorted(per_batch.items())))
