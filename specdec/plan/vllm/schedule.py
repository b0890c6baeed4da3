"""``num_speculative_tokens_per_batch_size`` from the measured gain of speculation at each batch size.

vLLM 0.32 picks each step's K from the scheduled requests through ``[start, end, K]`` ranges
(K = 0 still runs the speculative path). The gain at ``B`` rows and ``K`` tokens is a decode step's
output tokens per second over off's: the measured one (steps of exactly ``B`` rows in both runs)
blended with the fitted model's by weight ``n / (n + prior)``. The table takes at each ``B`` the
best K if its gain is at least ``1 + margin``, else 0, made non-increasing in ``B`` (extra rows
only take spare compute away) and merged into ranges; a table with one K throughout, or 0
throughout, is not proposed. A table is written from measured batch sizes only: a size no run
measured takes the K of the next larger measured size (the gain does not rise with the batch
size, so a K that pays there pays below it), and past the largest measured size nothing drafts;
the fit alone extrapolates there, and a table is not written on an extrapolation. The measured
sizes are the pool's arrivals' and a burst's (:func:`~.calibrate.with_bursts`), which reaches the
full batch.
docs/deploying.md ("Schedules") explains it for users, with the measurements behind the rule.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np

from ...control.batch_schedule import BatchSchedule, Schedule, validate_schedule
from ..policies import Policy
from ...estimate.step_cost import packed_features
from .calibrate import Calibration
from .engine_trace import fit_trace
from .candidates import Candidate

PRIOR_STEPS = 5.0  # model-estimate weight, in measured steps


@dataclasses.dataclass(frozen=True)
class Gain:
    """Gain of K-token drafts at one batch size (see the module docstring)."""

    rows: int
    k: int
    model: float
    measured: float | None
    steps: int

    @property
    def blended(self) -> float:
        if self.measured is None or self.steps == 0:
            return self.model
        w = self.steps / (self.steps + PRIOR_STEPS)
        return w * self.measured + (1 - w) * self.model


def mean_context(cal: Calibration) -> float:
    """Mean cached tokens of a decoding row: prompt plus half the output, over the pool's requests."""
    return float(np.mean([i.prompt_len + i.output_len / 2 for i in cal.items]))


def step_seconds(cal: Calibration, rows: int, context: float, k: int | None = None) -> float:
    """Seconds of a decode step of ``rows`` rows at ``context`` from the fitted model: each row drafts as
    often and as long as it did in the measurement, its drafts cut at ``k`` tokens (0: no drafts)."""
    share = cal.drafts / cal.row_steps if cal.row_steps and k != 0 else 0.0
    length = cal.draft_tokens / cal.drafts if cal.drafts else 0.0
    length = length if k is None else min(length, float(k))
    if share > 0:
        work = packed_features([(1, context), (1 + length, context)], [rows * (1 - share), rows * share])
    else:
        work = packed_features([(1, context)], [rows])
    return float(work @ cal.cost.weights)


def _model_rate(cal: Calibration, rows: int, context: float) -> float:
    """Output tokens per second of a decode step of ``rows`` rows, from the fitted model."""
    return rows * (1.0 + cal.accepted_per_row_step) / step_seconds(cal, rows, context)


def family_basis(members: Mapping[int, Calibration]) -> Calibration:
    """What a schedule of one method family is predicted from: the acceptance of the member with the
    largest K (a shorter chain accepts its prefix) and one step-cost fit over every member's steps
    (one member alone drafts one length)."""
    top = members[max(members)]
    samples = [smp for cal in members.values() for smp in cal.cost.samples]
    cost = fit_trace(samples, meta={**top.cost.meta, "family_of": sorted(members)}) if len(members) > 1 \
        else top.cost
    return dataclasses.replace(top, cost=cost)


def measured_scale(static: Calibration, measured: Calibration, candidate: Candidate, *, min_steps: int = 3) -> float:
    """How much slower (> 1) or faster a schedule's server ran than its family's model, at the batch
    sizes where it drafts seen ``min_steps`` times (median ratio in [0.5, 2]; 1 when none)."""
    ctx = mean_context(static)
    ratios = []
    for rows, steps in measured.per_batch.items():
        if len(steps) >= min_steps and candidate.k_at(rows) > 0:
            predicted = step_seconds(static, rows, ctx, k=candidate.k_at(rows))
            ratios.append(float(np.median([s for s, _ in steps])) / predicted)
    return float(np.clip(np.median(ratios), 0.5, 2.0)) if ratios else 1.0


def no_draft_tax(off_steps: Mapping[int, list[tuple[float, float]]], steps: Mapping[int, list[tuple[float, float]]],
                 candidate: Candidate, *, min_steps: int = 3) -> tuple[float, list[int]] | None:
    """How much longer a schedule's server ran a step without drafts than off's server ran a step of
    as many rows, from each server's decode steps per batch size (:attr:`Calibration.per_batch`'s
    form): the median over the batch sizes where the schedule says K = 0 and both servers ran
    ``min_steps`` steps of the ratio of their median step times (clipped to [0.5, 2]), and those
    sizes; None when no such size was measured. The K = 0 path is not free (vLLM still runs the
    speculative bookkeeping; specdec's drafter turns async scheduling off), and the drafting steps'
    fit, extrapolated to sizes where nothing drafts, is no measure of it."""
    ratios, sizes = [], []
    for rows in sorted(steps):
        here, there = steps[rows], off_steps.get(rows, [])
        if candidate.k_at(rows) == 0 and len(here) >= min_steps and len(there) >= min_steps:
            ratios.append(float(np.median([s for s, _ in here])) / float(np.median([s for s, _ in there])))
            sizes.append(rows)
    return (float(np.clip(np.median(ratios), 0.5, 2.0)), sizes) if ratios else None


def gains(off: Calibration, by_k: Mapping[int, Calibration], max_rows: int, *, min_steps: int = 3) -> list[Gain]:
    """Every ``(rows, K)`` gain for ``rows`` in ``1..max_rows`` (module docstring)."""
    ctx = mean_context(off)
    out = []
    for rows in range(1, max_rows + 1):
        base_model = _model_rate(off, rows, ctx)
        base_meas = off.step_at(rows, min_steps)
        for k, cal in sorted(by_k.items()):
            model = _model_rate(cal, rows, ctx) / base_model
            meas = cal.step_at(rows, min_steps)
            measured, n = None, 0
            if meas is not None and base_meas is not None:
                measured = (meas[1] / meas[0]) / (base_meas[1] / base_meas[0])
                n = min(len(cal.per_batch[rows]), len(off.per_batch[rows]))
            out.append(Gain(rows, k, model, measured, n))
    return out


def _measured(g: Gain) -> bool:
    return g.measured is not None and g.steps > 0


def derive(off: Calibration, family: Mapping[int, Candidate], cals: Mapping[int, Calibration], max_rows: int, *,
           margin: float = 0.02, min_steps: int = 3) -> tuple[Schedule | None, list[Gain]]:
    """The schedule for one method family (``family[K]`` measured as ``cals[K]``) and the gains it was
    read from; the schedule is None when it would be a static K or off (module docstring)."""
    if not family or set(family) != set(cals):
        raise ValueError("derive needs one calibration per candidate of the family")
    table = gains(off, cals, max_rows, min_steps=min_steps)
    best: list[int | None] = []  # None: no K measured at this size
    for rows in range(1, max_rows + 1):
        here = [g for g in table if g.rows == rows and _measured(g)]
        top = max(here, key=lambda g: (g.blended, -g.k), default=None)
        best.append(None if top is None else top.k if top.blended >= 1.0 + margin else 0)
    for i in range(len(best) - 1, -1, -1):  # an unmeasured size: the next larger measured size's K
        if best[i] is None:
            best[i] = best[i + 1] if i + 1 < len(best) else 0
    for i in range(1, len(best)):  # non-increasing in the batch size
        best[i] = min(best[i], best[i - 1])
    if len(set(best)) == 1:
        return None, table
    ranges: list[list[int]] = []
    for rows, k in enumerate(best, 1):
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = rows
        else:
            ranges.append([rows, rows, k])
    ranges[-1][1] = max(ranges[-1][1], max_rows)
    return validate_schedule(ranges, max(best)), table


def schedule_candidate(family: Mapping[int, Candidate], schedule: Schedule) -> Candidate:
    """The candidate that runs ``schedule`` with the family's method (K = the schedule's largest)."""
    k = max(e[2] for e in schedule)
    proto = family[max(family)]
    return Candidate(f"{proto.method}:sched", proto.method, k, proto.artifact, schedule)


def pays_up_to(table: list[Gain], k: int, margin: float = 0.0) -> int:
    """The largest measured batch size up to which K-token drafts gained more than ``margin`` at every
    measured size (0: none; the module docstring's reading of the sizes between)."""
    last = 0
    for g in sorted((g for g in table if g.k == k and _measured(g)), key=lambda g: g.rows):
        if g.blended < 1.0 + margin:
            break
        last = g.rows
    return last


class SchedulePolicy(Policy, BatchSchedule):
    """The simulator's policy for a schedule candidate: its K at the running batch size, every step
    (vLLM's lookup, or specdec's drafter applying the table for ``custom_class``)."""

    name = "schedule"

    def __init__(self, candidate: Candidate):
        if candidate.schedule is None or candidate.k < 1:
            raise ValueError(f"{candidate.name} has no schedule that speculates")
        BatchSchedule.__init__(self, candidate.schedule, candidate.k)
        self.candidate = candidate


def gain_table_markdown(table: list[Gain], rows_shown: int = 16) -> list[str]:
    """A markdown table: rows (batch sizes) x K, each cell the blended gain (measured / model, steps)."""
    ks = sorted({g.k for g in table})
    sizes = sorted({g.rows for g in table})
    if len(sizes) > rows_shown:  # the first ones, then every other, so a wide range stays readable
        step = math.ceil((len(sizes) - 8) / (rows_shown - 8))
        sizes = sizes[:8] + sizes[8::step]
    lines = ["| batch size | " + " | ".join(f"K = {k}" for k in ks) + " |", "|---:|" + "---:|" * len(ks)]
    cell = {(g.rows, g.k): g for g in table}
    for b in sizes:
        parts = []
        for k in ks:
            g = cell[(b, k)]
            meas = "-" if g.measured is None else f"{g.measured:.2f}"
            parts.append(f"{g.blended:.2f} ({meas} / {g.model:.2f}, {g.steps})")
        lines.append(f"| {b} | " + " | ".join(parts) + " |")
    return lines
