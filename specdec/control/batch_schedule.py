"""A batch-size schedule: the draft tokens per request at each running batch size, read as vLLM reads
``num_speculative_tokens_per_batch_size`` (``vllm/v1/spec_decode/dynamic/utils.py``).

A schedule is ``((start, end, K), ...)``: inclusive batch-size ranges starting at 1, non-overlapping,
``K >= 0`` (0: no drafts). A batch size in a gap between ranges, or past the last one, takes the K of
the range before it. vLLM applies the table itself for its own methods; for ``custom_class`` it does
not, so specdec's drafter runs :class:`BatchSchedule` as the outermost of its controllers, and the
planner's simulator runs the same lookup.
"""

from __future__ import annotations

from typing import Sequence

from .interface import BatchView, Decision, Outcome

Schedule = tuple[tuple[int, int, int], ...]


def validate_schedule(schedule: Sequence[Sequence[int]], k: int) -> Schedule:
    """The schedule sorted by start, as vLLM checks it: ranges positive, start <= end, non-overlapping,
    the first starting at 1, K >= 0; and no K above ``k`` (vLLM would cap it silently).

    Raises:
        ValueError: naming the rule the schedule breaks.
    """
    entries = []
    for entry in schedule:
        if len(entry) != 3:
            raise ValueError(f"schedule entry {entry!r} must be (start, end, K)")
        entries.append(tuple(int(x) for x in entry))
    out: list[tuple[int, int, int]] = []
    previous = 0
    for start, end, kk in sorted(entries):
        if not (1 <= start <= end) or kk < 0 or start <= previous:
            raise ValueError(f"schedule {list(schedule)!r}: ranges must be positive and non-overlapping "
                             "with K >= 0")
        if kk > k:
            raise ValueError(f"schedule {list(schedule)!r}: K {kk} exceeds num_speculative_tokens {k}")
        previous = end
        out.append((start, end, kk))
    if not out or out[0][0] != 1:
        raise ValueError(f"schedule {list(schedule)!r} must start at batch size 1")
    return tuple(out)


def k_at(schedule: Schedule, rows: int, k: int) -> int:
    """Draft tokens per request at ``rows`` running requests (at most ``k``; the module docstring's
    lookup). ``schedule`` must come from :func:`validate_schedule`."""
    last = schedule[0][2]
    for start, end, kk in schedule:
        if rows < start:
            break
        last = kk
        if rows <= end:
            break
    return min(k, last)


class BatchSchedule:
    """A :class:`~specdec.control.interface.DraftController` that drafts the schedule's K at the running
    batch size (at most ``BatchView.cap``), every step; it learns nothing while serving."""

    unit = "tokens"

    def __init__(self, schedule: Sequence[Sequence[int]], k: int):
        self.k = int(k)
        self.schedule = validate_schedule(schedule, self.k)

    @property
    def max_budget(self) -> int:
        return min(self.k, max(e[2] for e in self.schedule))

    def decide(self, batch: BatchView) -> Decision:
        rows = max(1, int(batch.rows))
        k = k_at(self.schedule, rows, self.k)
        k = k if batch.cap is None else min(k, batch.cap)
        return Decision(k, reason=f"schedule: K = {k} at {rows} requests") if k else \
            Decision(0, reason=f"schedule: no drafts at {rows} requests")

    def observe(self, outcome: Outcome) -> None:
        del outcome

    def reset(self) -> None:
        pass

