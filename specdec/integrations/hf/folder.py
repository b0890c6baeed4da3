"""The string form: ``model.generate(..., custom_generate=specdec.integrations.hf.FOLDER, trust_remote_code=True)``.

transformers runs ``<folder>/custom_generate/generate.py`` with ``generate``'s raw arguments.
:func:`generate_from_folder` takes out what only this form sees (``tokenizer=``,
``assistant_tokenizer=``, the streamer, the assistant model), turns stop strings into a
``StopStringCriteria`` (they need the tokenizer), and re-enters ``model.generate`` with the
callable, so the preparation is ``generate``'s own. The same folder copied into a checkpoint makes
its ``generate`` specdec's under ``trust_remote_code=True``.
"""

from __future__ import annotations

import functools

from .caller import CallerArguments
from .decode_loop import OPTION_NAMES, Options, decode


def generate_from_folder(model, inputs=None, generation_config=None, logits_processor=None, stopping_criteria=None,
                         prefix_allowed_tokens_fn=None, synced_gpus=None, assistant_model=None, streamer=None,
                         negative_prompt_ids=None, negative_prompt_attention_mask=None, **kwargs):
    """Decode with specdec from ``generate``'s raw arguments (see the module docstring)."""
    options = Options(**{k: kwargs.pop(k) for k in OPTION_NAMES if k in kwargs})
    tokenizer, assistant_tokenizer = kwargs.pop("tokenizer", None), kwargs.pop("assistant_tokenizer", None)
    stop_strings = _stop_strings(model, generation_config, kwargs)
    if stop_strings:
        if tokenizer is None:
            raise ValueError("stop_strings need the model's tokenizer: pass tokenizer= to generate")
        from transformers import StoppingCriteriaList
        from transformers.generation.stopping_criteria import StopStringCriteria

        stopping_criteria = StoppingCriteriaList([*(stopping_criteria or ()),
                                                  StopStringCriteria(tokenizer=tokenizer, stop_strings=stop_strings)])
        kwargs["stop_strings"] = None  # a keyword wins over every config: generate builds no criterion of its own
    caller = CallerArguments(streamer=streamer, assistant_model=assistant_model, synced_gpus=synced_gpus,
                             tokenizer=tokenizer, assistant_tokenizer=assistant_tokenizer)
    loop = functools.partial(_prepared, options=options, caller=caller)
    # The class's generate: a checkpoint loaded with this folder has its instance's generate bound to it.
    return type(model).generate(model, inputs, generation_config=generation_config, logits_processor=logits_processor,
                                stopping_criteria=stopping_criteria, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
                                synced_gpus=synced_gpus, assistant_model=assistant_model, streamer=streamer,
                                negative_prompt_ids=negative_prompt_ids,
                                negative_prompt_attention_mask=negative_prompt_attention_mask, custom_generate=loop,
                                **kwargs)


def _prepared(model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None, *,
              options: Options, caller: CallerArguments, **model_kwargs):
    """The callable the folder form hands ``generate``: its own arguments bound, nothing read from frames."""
    return decode(model, input_ids, logits_processor, stopping_criteria, generation_config, options, caller,
                  model_kwargs)


def _stop_strings(model, generation_config, kwargs):
    """The stop strings ``generate`` would use: the keyword, else the given config's, else the model's."""
    if "stop_strings" in kwargs:
        return kwargs["stop_strings"]
    for config in (generation_config, getattr(model, "generation_config", None)):
        value = getattr(config, "stop_strings", None)
        if value is not None:
            return value
    return None
