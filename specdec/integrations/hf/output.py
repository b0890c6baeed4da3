"""What ``return_dict_in_generate=True`` returns: ``generate``'s own output class, plus specdec's facts.

``sequences`` is what ``generate`` would return; ``scores``, ``logits``, ``attentions`` and
``hidden_states`` are refused when asked for (:mod:`specdec.integrations.hf.config` says why) and
``cache`` is None: specdec verifies with its own right-padded cache, which ``generate`` cannot
continue from. Added: each row's :class:`~specdec.engine.metrics.RequestMetrics` (steps, drafted and
accepted tokens, time per phase) and why it finished (``"stop"``: an EOS id or a stopping criterion;
``"length"``: ``max_length``).
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers.generation.utils import GenerateDecoderOnlyOutput


@dataclass
class SpecdecGenerateOutput(GenerateDecoderOnlyOutput):
    """:class:`transformers.generation.utils.GenerateDecoderOnlyOutput` with ``metrics`` (one
    :class:`~specdec.engine.metrics.RequestMetrics` per row) and ``finish_reasons`` (one per row)."""

    metrics: list | None = None
    finish_reasons: list | None = None
