"""The logits processors ``model.generate`` prepared, applied to every verified tree node.

``generate`` builds one ``LogitsProcessorList`` from the generation config, the caller's
``logits_processor=`` and ``prefix_allowed_tokens_fn=``; sampling runs ``softmax`` of the processed
scores, greedy decoding their argmax. specdec reproduces that law exactly by processing every
verify row with the context that row stands for, through
:class:`~specdec.sampling.processors.RowProcessors` (the same per-node path the decoder uses for a
checkpoint's own processors): a tree node's row is processed after the request's *padded* prompt
(``generate`` runs its processors on left-padded rows, so length-based processors count the
padding), the tokens emitted so far and the draft path to the node. The instances are the ones
``generate`` built (the same code runs), except two whose state is indexed by batch row, which get
one copy per request: ``RepetitionPenaltyLogitsProcessor`` with per-row ``prompt_ignore_length``
(the padding it skips) and ``PrefixConstrainedLogitsProcessor`` (``prefix_allowed_tokens_fn`` is
called with the request's batch index).

**Sampling.** The trailing run of sampling warpers (temperature, top-k, top-p, min-p, in that order,
with ``-inf`` filtering and ``min_tokens_to_keep=1``, as ``generate`` builds them) becomes the
:class:`~specdec.sampling.SamplingParams` the rejection sampler processes with
(:func:`~specdec.sampling.params.process_logits` applies them in the same order), so proposers that
follow the request's sampling see it. Everything before that run, warpers included, is applied per
node; with nothing to map, sampling is from ``softmax`` of the processed scores (temperature 1), which
is what ``generate`` samples.

**A processor specdec does not know** (the caller's own class) is applied per node the same way. Its
contract: its output for a row depends only on that row's ids and scores. One call's rows are the
tree nodes of one request at one depth, not the batch's rows, so a processor that keeps state across
calls or reads the batch position would not be reproduced; say so in its documentation, and test it.

**Refused by name** (:data:`REFUSED`): processors that run the model on a second context
(classifier-free guidance), keep per-batch state across calls (SynthID watermarking) or belong to
encoder-decoder and audio models.
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
    """:class:`RowProcessors` whose rows are read after a fixed prefix: the request's left padding,
    which ``generate``'s processors see in front of the prompt."""

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
    """``(per-node processors, sampling)``: the trailing warpers that map onto :class:`SamplingParams`
    (sampling only), and everything before them; greedy decoding is ``SamplingParams(temperature=0)``
    after every processor."""
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
    """``(rank, field, value)`` when ``p`` is one of the warpers :class:`SamplingParams` applies
    identically (``-inf`` filtering, at least the top token kept), else None."""
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
    """One :class:`PaddedRowProcessors` per request (None when there is nothing to apply): the shared
    instances, with a per-request copy of the two processors whose state is indexed by batch row."""
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
