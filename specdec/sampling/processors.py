"""The checkpoint's own generation settings: honoured exactly during verification, or refused by name.

``model.generate`` applies a checkpoint's logits processors and sampling defaults, so the decoder
applies them too or refuses by name. Honoured exactly (each depends only on a row's own context, so
every verify row is processed with transformers' own classes over the context it stands for), in
transformers' order: ``sequence_bias``, ``repetition_penalty``, ``no_repeat_ngram_size``,
``bad_words_ids``, ``min_length``, ``min_new_tokens``, ``suppress_tokens``. With ``do_sample=True`` the
config's temperature, top-k (default 50), top-p and min-p become the default :class:`SamplingParams`
(an explicit one replaces them all). Anything else that changes outputs (beam search, guidance,
watermarking, forced BOS/EOS, typical sampling, ...) raises :class:`UnsupportedGenerationSetting` naming
it; override with another ``generation_config`` (``GenerationConfig()``: library defaults).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

import torch

from .params import SamplingParams

# Output-changing settings specdec does not apply, with the value that turns each off.
_REFUSED = {
    "num_beams": 1, "num_beam_groups": 1, "penalty_alpha": None, "dola_layers": None, "diversity_penalty": 0.0,
    "guidance_scale": 1.0, "watermarking_config": None, "constraints": None, "force_words_ids": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "exponential_decay_length_penalty": None,
    "begin_suppress_tokens": None, "remove_invalid_values": False, "renormalize_logits": False,
    "encoder_repetition_penalty": 1.0, "encoder_no_repeat_ngram_size": 0, "stop_strings": None,
    "token_healing": False, "low_memory": None, "num_return_sequences": 1,
}
# Sampling filters of do_sample=True that SamplingParams has no equivalent for.
_REFUSED_WHEN_SAMPLING = {"typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None}


class UnsupportedGenerationSetting(ValueError):
    """A generation setting the decoder cannot reproduce exactly (named in the message)."""


def effective_config(model, generation_config=None):
    """The settings ``model.generate(generation_config=...)`` would decode with: the given (or the
    model's) config, its unset fields filled with transformers' library defaults (top-k 50, ...)."""
    from transformers import GenerationConfig

    config = copy.deepcopy(generation_config if generation_config is not None
                           else getattr(model, "generation_config", None) or GenerationConfig())
    config.update(**GenerationConfig._get_default_generation_params(), defaults_only=True)
    return config


@dataclass(frozen=True)
class GenerationSettings:
    """What a decoder applies of a generation config: ``processors`` (``(name, value)`` switched on, in
    order), ``sampling`` (with ``do_sample``, else None) and ``eos`` (the config's EOS ids)."""

    processors: tuple[tuple[str, object], ...] = ()
    sampling: SamplingParams | None = None
    eos: tuple[int, ...] = ()

    @classmethod
    def from_config(cls, config) -> "GenerationSettings":
        """From an effective config (:func:`effective_config`); refuses what cannot be honoured."""
        sampling = bool(getattr(config, "do_sample", False))
        for name, off in list(_REFUSED.items()) + (list(_REFUSED_WHEN_SAMPLING.items()) if sampling else []):
            value = getattr(config, name, off)
            if value is not None and value != off and not (off is None and value in (False, 0)):
                raise UnsupportedGenerationSetting(
                    f"the generation config sets {name}={value!r}, which speculative decoding does not reproduce: "
                    f"set model.generation_config.{name} = {off!r}, or pass generation_config=GenerationConfig() "
                    "to the decoder to use transformers' defaults")
        eos = config.eos_token_id
        eos = () if eos is None else (int(eos),) if isinstance(eos, int) else tuple(int(t) for t in eos)
        on = []
        for name, active in (("sequence_bias", config.sequence_bias is not None),
                             ("repetition_penalty", config.repetition_penalty not in (None, 1.0)),
                             ("no_repeat_ngram_size", bool(config.no_repeat_ngram_size)),
                             ("bad_words_ids", config.bad_words_ids is not None),
                             ("min_length", bool(config.min_length) and bool(eos)),
                             ("min_new_tokens", bool(config.min_new_tokens) and bool(eos)),
                             ("suppress_tokens", config.suppress_tokens is not None)):
            if active:
                on.append((name, getattr(config, name)))
        params = None
        if sampling:
            top_k = config.top_k or None
            params = SamplingParams(temperature=float(config.temperature if config.temperature is not None else 1.0),
                                    top_k=int(top_k) if top_k else None, top_p=float(config.top_p or 1.0),
                                    min_p=float(config.min_p or 0.0))
        return cls(tuple(on), params, eos)

    @classmethod
    def from_model(cls, model, generation_config=None) -> "GenerationSettings":
        return cls.from_config(effective_config(model, generation_config))

    def for_request(self, prompt_len: int) -> "RowProcessors | None":
        """The processors of one request (None when none is on)."""
        if not self.processors:
            return None
        from transformers.generation import logits_process as lp

        make = {
            "sequence_bias": lambda v: lp.SequenceBiasLogitsProcessor(sequence_bias=v),
            "repetition_penalty": lambda v: lp.RepetitionPenaltyLogitsProcessor(v),
            "no_repeat_ngram_size": lambda v: lp.NoRepeatNGramLogitsProcessor(v),
            "bad_words_ids": lambda v: lp.NoBadWordsLogitsProcessor(v, list(self.eos)),
            "min_length": lambda v: lp.MinLengthLogitsProcessor(v, list(self.eos)),
            "min_new_tokens": lambda v: lp.MinNewTokensLengthLogitsProcessor(prompt_len, v, list(self.eos)),
            "suppress_tokens": lambda v: lp.SuppressTokensLogitsProcessor(v),
        }
        return RowProcessors([make[name](value) for name, value in self.processors])


class RowProcessors:
    """One request's processors, applied to verify rows with each row's own context."""

    def __init__(self, processors: list):
        self.processors = processors

    def apply(self, scores: torch.Tensor, sequence: Sequence[int], tree) -> torch.Tensor:
        """Processed ``scores [R >= 1 + n, V]``: row 0 after ``sequence`` (prompt + emitted), row ``1 + i``
        after ``sequence`` + the path to node ``i``; padding rows are returned as they are."""
        out = scores.clone()
        groups: dict[int, list[int]] = {0: [-1]}
        for i, d in enumerate(tree.depth_list):
            groups.setdefault(d, []).append(i)
        tokens = tree.tokens.tolist()
        for nodes in groups.values():
            rows = [1 + i for i in nodes]
            ids = torch.tensor([list(sequence) + [tokens[j] for j in (tree.path_to(i) if i >= 0 else [])]
                                for i in nodes], dtype=torch.long, device=scores.device)
            processed = scores[rows].clone()
            for p in self.processors:
                processed = p(ids, processed)
            out[rows] = processed
        return out
