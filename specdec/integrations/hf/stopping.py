"""The stopping criteria ``model.generate`` prepared, cut exactly where ``generate`` would stop.

``MaxLengthCriteria`` becomes the decoder's ``max_new_tokens`` (``max_length`` minus the padded
prompt length) and ``EosTokenCriteria`` its stop tokens. Every other criterion is called after each
emitted token on ``[1, L]`` (padded prompt and tokens so far, ``scores=None``), so a step that
emits several tokens ends at the first one after which a criterion stops; its verdict must depend
only on that row (or the clock).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

_HF_MODULE = "transformers.generation.stopping_criteria"


@dataclass(frozen=True)
class StopPlan:
    """How a call stops: ``max_new_tokens`` per request, the EOS ``stop_tokens``, and the
    ``row_criteria`` checked per emitted token (:meth:`first_stop`)."""

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
    ValueError without a ``MaxLengthCriteria``, or when it leaves no token."""
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
