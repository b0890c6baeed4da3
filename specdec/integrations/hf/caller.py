"""What ``model.generate`` received but does not hand to a ``custom_generate`` callable.

transformers 5.x passes a callable only the keyword arguments it declares beyond
``GenerationMixin._sample``'s, so ``streamer=``, ``assistant_model=`` and ``synced_gpus=`` never
reach it (the streamer has already received the prompt). :func:`generate_arguments` reads those
three, read-only, from the immediate caller's frame when its code object is
``GenerationMixin.generate``'s own, and reports nothing otherwise. ``tokenizer=`` cannot be
recovered: the folder form (:mod:`specdec.integrations.hf.folder`) receives it.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallerArguments:
    """``generate``'s own arguments the decoding loop needs: ``streamer`` (which already received the
    prompt), ``assistant_model``, ``synced_gpus`` (True is refused) and, when known, ``tokenizer`` and
    ``assistant_tokenizer``."""

    streamer: Any = None
    assistant_model: Any = None
    synced_gpus: bool | None = None
    tokenizer: Any = None
    assistant_tokenizer: Any = None


def _generate_code():
    from transformers.generation.utils import GenerationMixin

    return inspect.unwrap(GenerationMixin.generate).__code__


def generate_arguments(depth: int = 2) -> CallerArguments:
    """The :class:`CallerArguments` of the ``generate`` call ``depth`` frames up (2: the caller of the
    function calling this one), or an empty one when that frame is not ``GenerationMixin.generate``."""
    frame = sys._getframe(depth)
    try:
        if frame.f_code is not _generate_code():
            return CallerArguments()
        seen = frame.f_locals
        return CallerArguments(streamer=seen.get("streamer"), assistant_model=seen.get("assistant_model"),
                               synced_gpus=seen.get("synced_gpus"))
    finally:
        del frame
