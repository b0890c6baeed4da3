"""``model.generate`` without the checkpoint's generation defaults: the target's own argmax (or law).

A checkpoint's ``generation_config`` may carry a repetition penalty, ``no_repeat_ngram_size`` or
other logits processors. Then ``model.generate(do_sample=False)`` is not the argmax decoding that
speculative decoding reproduces, and data generated, baselines measured or answers replayed with
it would be of another decoding rule. Passing a fresh ``GenerationConfig`` is not enough:
transformers fills the fields that hold library defaults from ``model.generation_config``. So the
model's config is swapped for a default one during the call and restored afterwards.
"""

from __future__ import annotations

import torch


def clean_generate(model, input_ids: torch.Tensor, *, max_new_tokens: int, pad_token_id: int | None,
                   eos_token_id, attention_mask: torch.Tensor | None = None, sample: dict | None = None,
                   **generate_kwargs) -> torch.Tensor:
    """``model.generate`` greedy, or sampling with ``sample`` (e.g. ``{"temperature": 1.0,
    "top_k": 100}``), under library-default generation settings.

    ``input_ids``: ``LongTensor[B, T]`` (left-padded with ``attention_mask`` for ragged batches);
    ``generate_kwargs`` pass through (``prompt_lookup_num_tokens``, ``assistant_model``, ...).
    Returns what ``generate`` returns: ``LongTensor[B, T + new]``.
    """
    from transformers import GenerationConfig

    mode = {"do_sample": True, **sample} if sample else {"do_sample": False}
    config = GenerationConfig(max_new_tokens=max_new_tokens, pad_token_id=pad_token_id, eos_token_id=eos_token_id,
                              **mode)
    saved = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        with torch.inference_mode():
            return model.generate(input_ids, attention_mask=attention_mask, generation_config=config,
                                  **generate_kwargs)
    finally:
        model.generation_config = saved
