"""Each row's emitted tokens: cut at the first stop, streamed in ``generate``'s order, then assembled.

Rows progress raggedly, while ``generate`` streams one ``[B]`` tensor per position (the pad id in
finished rows): :class:`Collector` streams position ``i`` once every row has emitted its ``i``-th
token or finished, then ``end()``. The sequences are the prompt rows followed by each row's
tokens, finished rows padded to the longest.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from .inputs import Prompts
from .stopping import StopPlan


@dataclass
class _Row:
    tokens: list
    reason: str | None = None
    metrics: object = None


class Collector:
    """Gathers the decoder's step events for a batch (see the module docstring).

    Args:
        prompts: the batch's rows (their padded prompts are what row criteria read).
        plan: the stopping plan; its row criteria cut tokens here.
        pad_id: fills finished rows (None only when every row runs to the same length).
        streamer: ``generate``'s streamer, or None.
    """

    def __init__(self, prompts: Prompts, plan: StopPlan, pad_id: int | None, streamer=None):
        self.prompts, self.plan, self.pad_id, self.streamer = prompts, plan, pad_id, streamer
        self.rows = [_Row([]) for _ in prompts.prompts]
        self.streamed = 0

    @property
    def done(self) -> bool:
        """Every row has finished (by the decoder or by a row criterion)."""
        return all(r.reason is not None for r in self.rows)

    def add(self, event) -> None:
        """Take one :class:`~specdec.engine.decoder.StepEvent`; a row already stopped by a criterion
        ignores what the decoder still emits for it."""
        row = self.rows[event.index]
        if row.reason is not None:
            return
        new = list(event.tokens)
        context = self.prompts.pad_prefix[event.index] + self.prompts.prompts[event.index] + row.tokens
        cut = self.plan.first_stop(context, new)
        row.tokens += new if cut is None else new[: cut + 1]
        if cut is not None:
            row.reason, row.metrics = "stop", copy.deepcopy(event.metrics)
        elif event.finished:
            row.reason, row.metrics = event.finish_reason, event.metrics
        else:
            row.metrics = event.metrics
        self._stream()

    def _stream(self) -> None:
        if self.streamer is None:
            return
        while True:
            i = self.streamed
            if any(len(r.tokens) <= i and r.reason is None for r in self.rows):
                return  # a running row has not reached position i yet
            if all(len(r.tokens) <= i for r in self.rows):
                return  # every row finished before position i
            self.streamer.put(torch.tensor([self._at(r, i) for r in self.rows], dtype=torch.long))
            self.streamed += 1

    def _at(self, row: _Row, i: int) -> int:
        if i < len(row.tokens):
            return int(row.tokens[i])
        if self.pad_id is None:
            raise RuntimeError("a row finished early but no pad id was set (checked before decoding: a bug)")
        return self.pad_id

    def finish(self) -> None:
        """Stream what is left and end the streamer (every row has finished)."""
        if self.streamer is not None:
            self._stream()
            self.streamer.end()

    def sequences(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``LongTensor[B, T + L]``: the rows ``generate`` received, then each row's tokens, padded."""
        width = max(len(r.tokens) for r in self.rows)
        new = [[self._at(r, i) for i in range(width)] for r in self.rows]
        return torch.cat([input_ids, torch.tensor(new, dtype=input_ids.dtype, device=input_ids.device)], dim=1)

    @property
    def finish_reasons(self) -> list[str]:
        return [r.reason or "stop" for r in self.rows]

    @property
    def metrics(self) -> list:
        return [r.metrics for r in self.rows]
