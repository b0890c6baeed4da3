"""``specdec.integrations.hf.generate``: the ``custom_generate`` callable.

``model.generate(**inputs, custom_generate=specdec.integrations.hf.generate, proposer="suffix")``
runs ``generate``'s own preparation (generation config, logits processors, stopping criteria,
left-padded inputs, special tokens), then this function decodes with specdec instead of
``generate``'s loop. The keyword arguments it declares beyond ``generate``'s reach it (transformers
passes a callable the arguments its signature names): see :class:`~.loop.Options`.
"""

from __future__ import annotations

import torch

from .caller import generate_arguments
from .decode_loop import Options, decode


def generate(model, input_ids: torch.LongTensor, logits_processor=None, stopping_criteria=None,
             generation_config=None, *, proposer=None, decoder=None, target_tokenizer=None, cost_model=None,
             budget: str | int = "auto", max_budget: int | None = None, generator: torch.Generator | None = None,
             allow_mismatch: bool = False, **model_kwargs):
    """Speculative decoding as a ``custom_generate`` callable of transformers 5.x; exact.

    Greedy calls return what ``generate`` returns; sampled calls sample from the law ``generate``
    samples from (the same processors, warpers and stopping criteria). Batches are left-padded rows
    with their attention mask, as ``generate`` takes them; each row progresses at its own pace.

    Args:
        model, input_ids, logits_processor, stopping_criteria, generation_config, model_kwargs:
            what ``generate`` passes (``input_ids [B, T]``, left-padded).
        proposer, decoder, target_tokenizer, cost_model, budget, max_budget, generator, allow_mismatch:
            specdec's options (:class:`~specdec.integrations.hf.decode_loop.Options`).

    ``streamer=``, ``assistant_model=`` and ``synced_gpus=`` are honoured although transformers does
    not pass them to a callable (:mod:`~specdec.integrations.hf.caller` reads them from the ``generate``
    call); ``tokenizer=`` cannot be recovered that way: pass ``target_tokenizer=``, or use the folder
    form (``specdec.integrations.hf.FOLDER``), which also takes ``stop_strings=`` with ``tokenizer=``.

    Returns:
        ``LongTensor[B, T + L]`` (prompt rows, then the new tokens, finished rows padded), or with
        ``return_dict_in_generate=True`` a :class:`~specdec.integrations.hf.output.SpecdecGenerateOutput`.

    Raises:
        ValueError / TypeError: naming what cannot be reproduced, before any decoding forward.
    """
    options = Options(proposer, decoder, target_tokenizer, cost_model, budget, max_budget, generator, allow_mismatch)
    return decode(model, input_ids, logits_processor, stopping_criteria, generation_config, options,
                  generate_arguments(), model_kwargs)
