"""``specdec.integrations.hf.generate``: the ``custom_generate`` callable. ``generate`` runs its own
preparation (config, processors, stopping criteria, left-padded inputs), then this decodes with
specdec; transformers passes a callable the keyword arguments its signature names
(:class:`~.decode_loop.Options`)."""

from __future__ import annotations

import torch

from .caller import generate_arguments
from .decode_loop import Options, decode


def generate(model, input_ids: torch.LongTensor, logits_processor=None, stopping_criteria=None,
             generation_config=None, *, proposer=None, decoder=None, target_tokenizer=None, cost_model=None,
             budget: str | int = "auto", max_budget: int | None = None, generator: torch.Generator | None = None,
             allow_mismatch: bool = False, **model_kwargs):
    """Speculative decoding as a ``custom_generate`` callable of transformers 5.x; exact.

    Greedy calls return what ``generate`` returns; sampled calls sample from the law it samples from.
    ``input_ids [B, T]`` are left-padded rows with their attention mask; specdec's options are those
    of :class:`~specdec.integrations.hf.decode_loop.Options`. ``streamer=``, ``assistant_model=`` and
    ``synced_gpus=`` are honoured (:mod:`~specdec.integrations.hf.caller`); ``tokenizer=`` is not
    recoverable: pass ``target_tokenizer=`` or use the folder form (``FOLDER``).

    Returns ``LongTensor[B, T + L]`` (finished rows padded), or with ``return_dict_in_generate=True`` a
    :class:`~specdec.integrations.hf.output.SpecdecGenerateOutput`. Raises ValueError / TypeError naming
    what cannot be reproduced, before any decoding forward.
    """
    options = Options(proposer, decoder, target_tokenizer, cost_model, budget, max_budget, generator, allow_mismatch)
    return decode(model, input_ids, logits_processor, stopping_criteria, generation_config, options,
                  generate_arguments(), model_kwargs)
