"""What of a prepared generation config specdec cannot reproduce: refused by name, before any forward.

specdec reproduces greedy decoding and multinomial sampling, one sequence per row; every other
decoding mode, and the per-step outputs of ``return_dict_in_generate`` (a verify forward scores a
whole tree and keeps no per-token rows), is refused with the setting that selects it.
"""

from __future__ import annotations


class UnsupportedGenerateOption(ValueError):
    """A ``generate`` option specdec's ``custom_generate`` does not reproduce (named in the message)."""


_MODES = (  # (field, is it on?, what it selects)
    ("num_beams", lambda v: v is not None and v > 1, "beam search"),
    ("constraints", lambda v: v is not None, "constrained beam search"),
    ("force_words_ids", lambda v: v is not None, "constrained beam search"),
    ("penalty_alpha", lambda v: v is not None and v > 0, "contrastive search"),
    ("dola_layers", lambda v: v is not None, "DoLa decoding"),
    ("use_mtp", lambda v: bool(v), "multi-token-prediction speculation"),
    ("assistant_early_exit", lambda v: v is not None, "early-exit self-speculation"),
    ("speculation_type", lambda v: v is not None, "Hugging Face's own speculation type"),
)
_OUTPUTS = {
    "output_scores": "the processed scores of each emitted token are not kept: one verify forward scores a whole "
                     "draft tree, and the rows of draft nodes that were not emitted have no place in generate's "
                     "per-step tuple",
    "output_logits": "the raw logits of each emitted token are not kept (one verify forward scores a whole draft "
                     "tree)",
    "output_attentions": "attention weights of a verify forward cover a draft tree laid over a right-padded cache, "
                         "not generate's one-token steps",
    "output_hidden_states": "hidden states of a verify forward cover a draft tree, not generate's one-token steps",
}


def check_generation_config(config, synced_gpus: bool | None) -> None:
    """Refuse every decoding mode and per-step output specdec does not reproduce (see the module
    docstring). ``config``: the generation config ``generate`` prepared."""
    for name, on, mode in _MODES:
        value = getattr(config, name, None)
        if on(value):
            raise UnsupportedGenerateOption(
                f"{name}={value!r} selects {mode}, which specdec's custom_generate does not reproduce: it decodes "
                "greedily or by sampling, one sequence per row (drop the setting, or decode without custom_generate)")
    if synced_gpus:
        raise UnsupportedGenerateOption("synced_gpus=True (lock-step decoding across processes) is not supported by "
                                        "specdec's custom_generate")
    if getattr(config, "return_dict_in_generate", False):
        for name, why in _OUTPUTS.items():
            if getattr(config, name, False):
                raise UnsupportedGenerateOption(
                    f"return_dict_in_generate with {name}=True: {why}. specdec returns the sequences and its "
                    "per-request metrics; drop the flag")
