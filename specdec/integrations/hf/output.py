"""What ``return_dict_in_generate=True`` returns: ``generate``'s output class with ``sequences``,
``cache=None`` (specdec's right-padded cache cannot be continued by ``generate``), and each row's
:class:`~specdec.engine.metrics.RequestMetrics` and finish reason (``"stop"`` or ``"length"``)."""

from __future__ import annotations

from dataclasses import dataclass

from transformers.generation.utils import GenerateDecoderOnlyOutput


@dataclass
class SpecdecGenerateOutput(GenerateDecoderOnlyOutput):
    """:class:`transformers.generation.utils.GenerateDecoderOnlyOutput` with ``metrics`` (one
    :class:`~specdec.engine.metrics.RequestMetrics` per row) and ``finish_reasons`` (one per row)."""

    metrics: list | None = None
    finish_reasons: list | None = None
