"""What ``model.generate`` received but does not hand to a ``custom_generate`` callable.

transformers 5.x (checked on 5.25) prepares the inputs, the logits processors and the stopping
criteria, then calls a callable ``custom_generate`` with those and with only the keyword arguments
the callable declares beyond ``GenerationMixin._sample``'s (``_extract_generation_mode_kwargs``
replaces the mode's own arguments by them). So ``streamer=``, ``assistant_model=`` and
``synced_gpus=``, which are named parameters of ``generate``, never reach the callable, although
``generate`` has already written the prompt to the streamer. A user's streamer would then see the
prompt and nothing more, and never ``end()`` (a ``TextIteratorStreamer`` consumer waits forever);
an assistant model would be dropped without a word.

:func:`generate_arguments` reads those three values, read-only, from the frame of the ``generate``
call that invoked the callable: the immediate caller, recognised by its code object being
``GenerationMixin.generate``'s own (decorators unwrapped). Nothing is read from any other frame:
called some other way, it reports nothing. ``tokenizer=`` and ``assistant_tokenizer=`` cannot be
recovered (``generate`` pops them into a dictionary it then discards): the folder form
(:mod:`specdec.integrations.hf.folder`) receives them.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallerArguments:
    """``generate``'s own arguments that the decoding loop needs.

    Attributes:
        streamer: the streamer ``generate`` was given (it has already received the prompt).
        assistant_model: Hugging Face's assistant model, mapped to specdec's draft-model proposer.
        synced_gpus: True refuses the call (lock-step decoding across processes is not supported).
        tokenizer: the target's tokenizer (stop strings, tokenizer-bound proposers), when known.
        assistant_tokenizer: the assistant's tokenizer, when known.
    """

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
