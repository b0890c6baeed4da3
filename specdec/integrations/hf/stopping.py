"""The stopping criteria ``model.generate`` prepared, cut exactly where ``generate`` would stop.

``generate`` checks its criteria after every token, on the whole (left-padded) row. A speculative
step emits several tokens at once, so each emitted token is checked as if it had been the last one,
and a request's output ends at the first token after which a criterion says stop: tokens past a
stop are never emitted nor streamed.

* ``MaxLengthCriteria`` becomes the decoder's ``max_new_tokens`` (``max_length`` minus the padded
  prompt length, as ``generate`` counts), ``EosTokenCriteria`` its stop tokens (one id or several):
  the decoder itself ends those requests, which then leave the batch.
* Every other criterion (``StopStringCriteria``, ``MaxTimeCriteria``, the caller's own) is called per
  emitted token on ``[1, L]``: the request's padded prompt and its tokens up to that one, with
  ``scores=None`` (what ``generate`` passes unless ``output_scores`` is on, which specdec refuses).
  Its contract: its verdict for a row depends only on that row (or on the clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

_HF_MODULE = "transformers.generation.stopping_criteria"


@dataclass(frozen=True)
class StopPlan:
    """How a call stops.

    Attributes:
        max_new_tokens: tokens each request may emit (from ``max_length``).
        stop_tokens: the EOS ids (the decoder stops a request at the first).
        row_criteria: criteria checked per emitted token (:meth:`first_stop`).
    """

    max_new_tokens: int
    stop_tokens: frozenset[int]
    row_criteria: tuple = ()

    @property
    def can_stop_early(self) -> bool:
        """Whether requests may end before ``max_new_tokens`` (then finished rows need a pad id)."""
        return bool(self.stop_tokens or self.row_criteria)

    def first_stop(self, context: Sequence[int], new: Sequence[int]) -> int | None:
        """Index in ``new`` of the first token after which a row criterion stops the request, with
        ``context`` (padded prompt and earlier tokens) before ``new``; None when none does."""
        if not self.row_criteria:
            return None
        seq = list(context)
        for j, token in enumerate(new):
            seq.append(int(token))
            ids = torch.tensor([seq], dtype=torch.long)
            if any(bool(torch.as_tensor(c(ids, None)).reshape(-1)[0]) for c in self.row_criteria):
                return j
        return None


def plan_stopping(criteria, width: int) -> StopPlan:
    """A :class:`StopPlan` from ``generate``'s ``stopping_criteria`` for prompts padded to ``width``.

    Raises:
        ValueError: no ``max_length`` (``generate`` always sets one), or one that leaves no token.
    """
    max_length, stops, rows = None, set(), []
    for c in criteria or ():
        kind = type(c).__name__ if type(c).__module__ == _HF_MODULE else None
        if kind == "MaxLengthCriteria":
            max_length = c.max_length if max_length is None else min(max_length, c.max_length)
        elif kind == "EosTokenCriteria":
            stops.update(int(t) for t in torch.as_tensor(c.eos_token_id).reshape(-1).tolist())
        else:
            rows.append(c)
    if max_length is None:
        raise ValueError("the stopping criteria hold no MaxLengthCriteria: pass max_new_tokens or max_length")
    if max_length - width < 1:
        raise ValueError(f"max_length={max_length} leaves no token to generate after the {width}-token (padded) "
                         "prompt: raise max_new_tokens")
    return StopPlan(max_length - width, frozenset(stops), tuple(rows))
