"""The logits processors ``model.generate`` prepared, applied to every verified tree node.

Each verify row is processed (:class:`~specdec.sampling.processors.RowProcessors`) with the context
it stands for: the request's *left-padded* prompt (``generate``'s processors count the padding),
the tokens emitted so far and the draft path to the node. The instances are ``generate``'s own,
except one copy per request of the two whose state is indexed by batch row
(``RepetitionPenaltyLogitsProcessor``, ``PrefixConstrainedLogitsProcessor``). With sampling the
trailing run of warpers (temperature, top-k, top-p, min-p, ``-inf`` filtering) becomes the
:class:`~specdec.sampling.SamplingParams` the rejection sampler applies in the same order;
everything before it runs per node. A caller's own processor must depend only on its row's ids
and scores (one call's rows are one request's nodes at one depth). Processors that cannot be
applied per node are refused by name (:data:`REFUSED`). Details: docs/huggingface.md.
"""

from __future__ import annotations

from typing import Sequence

from ...sampling.params import SamplingParams
from ...sampling.processors import RowProcessors

_GUIDANCE = ("classifier-free guidance (guidance_scale, negative_prompt_ids) runs the model on a second, "
             "unconditional context at every step, which specdec's verify forward does not")
_AUDIO = "processors of audio models, which specdec does not verify"
_ENCODER = "processors reading an encoder's input (encoder-decoder models, which specdec does not verify)"
#: Processor class name -> why it is refused.
REFUSED = {
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": _GUIDANCE,
    "ClassifierFreeGuidanceLogitsProcessor": _GUIDANCE,
    "DiaClassifierFreeGuidanceLogitsProcessor": _GUIDANCE,
    "SynthIDTextWatermarkLogitsProcessor": ("SynthID watermarking keeps per-batch state across calls (its n-gram "
                                            "context), so it cannot score the nodes of a draft tree"),
    "EncoderRepetitionPenaltyLogitsProcessor": _ENCODER,
    "EncoderNoRepeatNGramLogitsProcessor": _ENCODER,
    "WhisperTimeStampLogitsProcessor": _AUDIO,
    "WhisperNoSpeechDetection": _AUDIO,
    "AlternatingCodebooksLogitsProcessor": _AUDIO,
    "BarkEosPrioritizerLogitsProcessor": _AUDIO,
    "DiaEOSChannelFilterLogitsProcessor": _AUDIO,
    "DiaEOSDelayPatternLogitsProcessor": _AUDIO,
}
#: Warper class -> SamplingParams field, in the order process_logits applies them.
_WARPERS = (("TemperatureLogitsWarper", "temperature"), ("TopKLogitsWarper", "top_k"),
            ("TopPLogitsWarper", "top_p"), ("MinPLogitsWarper", "min_p"))


class UnsupportedLogitsProcessor(ValueError):
    """A logits processor ``generate`` prepared that specdec cannot apply exactly (named in the message)."""


class PaddedRowProcessors(RowProcessors):
    """:class:`RowProcessors` whose rows are read after the request's left padding."""

    def __init__(self, processors: list, prefix: Sequence[int]):
        super().__init__(processors)
        self.prefix = list(prefix)

    def apply(self, scores, sequence, tree):
        return super().apply(scores, self.prefix + list(sequence), tree)


def check_processors(processors) -> None:
    """Refuse, by class name and with the reason, every processor specdec cannot apply per node."""
    for p in processors or ():
        reason = REFUSED.get(type(p).__name__)
        if reason is not None:
            raise UnsupportedLogitsProcessor(f"model.generate prepared a {type(p).__name__}: {reason}. Turn it off "
                                             "to decode with specdec (or decode this call without custom_generate)")


def split_processors(processors, do_sample: bool) -> tuple[list, SamplingParams]:
    """``(per-node processors, sampling)``: with ``do_sample`` the trailing warpers that map onto
    :class:`SamplingParams` and everything before them; greedy is ``SamplingParams(temperature=0)``
    after every processor. Raises :class:`UnsupportedLogitsProcessor` for a refused processor."""
    processors = list(processors or ())
    check_processors(processors)
    if not do_sample:
        return processors, SamplingParams(temperature=0)
    fields: dict[str, float | int] = {}
    cut, rank = len(processors), len(_WARPERS)
    for i in range(len(processors) - 1, -1, -1):  # the longest mappable suffix, in process_logits' order
        mapped = _mapped_warper(processors[i])
        if mapped is None or mapped[0] >= rank:
            break
        rank, (name, value) = mapped[0], mapped[1:]
        fields[name] = value
        cut = i
    return processors[:cut], SamplingParams(**fields)


def _mapped_warper(p) -> tuple[int, str, float | int] | None:
    """``(rank, field, value)`` when ``p`` is a warper :class:`SamplingParams` applies identically, else None."""
    for rank, (cls, field) in enumerate(_WARPERS):
        if type(p).__name__ != cls or type(p).__module__ != "transformers.generation.logits_process":
            continue
        if field != "temperature" and (getattr(p, "filter_value", None) != float("-inf")
                                       or getattr(p, "min_tokens_to_keep", 1) != 1):
            return None
        value = getattr(p, field)
        try:
            SamplingParams(**{field: value})
        except (TypeError, ValueError):
            return None
        return rank, field, value
    return None


def row_processors(processors: list, pad_prefix: Sequence[Sequence[int]]) -> list[PaddedRowProcessors | None]:
    """One :class:`PaddedRowProcessors` per request (None when there is nothing to apply), with per-request
    copies of the processors whose state is indexed by batch row."""
    if not processors:
        return [None] * len(pad_prefix)
    return [PaddedRowProcessors([_for_row(p, b) for p in processors], pads) for b, pads in enumerate(pad_prefix)]


def _for_row(p, b: int):
    """``p`` as request ``b`` needs it: its own copy when ``p``'s state is per batch row."""
    from transformers.generation import logits_process as lp

    if isinstance(p, lp.RepetitionPenaltyLogitsProcessor) and hasattr(p.prompt_ignore_length, "shape"):
        return lp.RepetitionPenaltyLogitsProcessor(p.penalty, prompt_ignore_length=int(p.prompt_ignore_length[b]))
    if isinstance(p, lp.PrefixConstrainedLogitsProcessor):
        fn, batch_id = p._prefix_allowed_tokens_fn, b // p._num_beams
        return lp.PrefixConstrainedLogitsProcessor(lambda _row, sent: fn(batch_id, sent), 1)
    return p
