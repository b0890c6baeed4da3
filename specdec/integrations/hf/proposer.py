"""Which proposer drafts a ``custom_generate`` call, and the checks that it may draft for this model.

Exactly one source, checked before any forward: ``proposer=`` (a spec string for
:func:`specdec.proposers.registry.make_proposer`, or a proposer object), ``decoder=`` (a
:class:`~specdec.SpeculativeDecoder` over this very model, reused), Hugging Face's
``assistant_model=`` (a :class:`~specdec.proposers.DraftModelProposer`) or
``prompt_lookup_num_tokens=N`` (a :class:`~specdec.proposers.SuffixProposer` of at most ``N`` nodes);
nothing means ``suffix``. A proposer bound to a checkpoint must carry this model's fingerprint
(``allow_mismatch=True``: a warning), one bound to a tokenizer that of the target's tokenizer, which
must then be given (docs/huggingface.md, "specdec's options").
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """The resolved proposer source: ``kind`` is ``"spec"``, ``"object"``, ``"decoder"``,
    ``"assistant"`` or ``"lookup"``; ``value`` what was given; ``max_budget`` a cap it implies."""

    kind: str
    value: object
    max_budget: int | None = None


def choose_source(model, *, proposer, decoder, assistant_model, prompt_lookup: int | None,
                  tokenizer) -> Source:
    """Pick the one proposer source (see the module docstring) and check what needs no weights loaded.
    ValueError for several sources, a decoder over another model, or a tokenizer-bound source without
    the target's tokenizer; TypeError for a wrong object."""
    given = {"proposer": proposer, "decoder": decoder, "assistant_model": assistant_model,
             "prompt_lookup_num_tokens": prompt_lookup}
    named = [k for k, v in given.items() if v is not None]
    if len(named) > 1:
        raise ValueError(f"specdec's custom_generate takes one proposer source, got {named}: keep one")
    if decoder is not None:
        from ...engine.decoder import SpeculativeDecoder

        if not isinstance(decoder, SpeculativeDecoder):
            raise TypeError(f"decoder= must be a specdec SpeculativeDecoder, got {type(decoder).__name__}")
        if decoder.target.model is not model:
            raise ValueError("decoder= was built over another model than the one generate was called on")
        return Source("decoder", decoder)
    if assistant_model is not None:
        _need_tokenizer(tokenizer, "assistant_model= (mapped to specdec's draft-model proposer)")
        return Source("assistant", assistant_model)
    if prompt_lookup is not None:
        if isinstance(prompt_lookup, bool) or not isinstance(prompt_lookup, int) or prompt_lookup < 1:
            raise ValueError(f"prompt_lookup_num_tokens must be an int >= 1, got {prompt_lookup!r}")
        return Source("lookup", prompt_lookup, max_budget=prompt_lookup)
    if proposer is None:
        return Source("spec", "suffix")
    if isinstance(proposer, str):
        if proposer.startswith("draft:"):
            _need_tokenizer(tokenizer, f"proposer={proposer!r}")
        return Source("spec", proposer)
    from ...proposers.base import Proposer

    if not isinstance(proposer, Proposer):
        raise TypeError(f"proposer= must be a spec string or a specdec Proposer, got {type(proposer).__name__}")
    bound = getattr(proposer.artifact, "bound_to", "nothing")
    if bound == "tokenizer":
        _need_tokenizer(tokenizer, f"a proposer bound to a tokenizer ({proposer.artifact.name})")
    return Source("object", proposer)


def build_proposer(source: Source, model, *, tokenizer, assistant_tokenizer, sampling, allow_mismatch: bool):
    """The proposer of ``source`` (None for ``"decoder"``), loaded and checked against ``model``; raises
    IncompatibleArtifactError for one bound to another checkpoint or tokenizer."""
    if source.kind == "decoder":
        return None
    vocab = int(model.get_output_embeddings().weight.shape[0])
    if source.kind == "spec":
        from ...proposers.registry import make_proposer

        return make_proposer(source.value, model, tokenizer, allow_mismatch=allow_mismatch)
    if source.kind == "lookup":
        from ...proposers.suffix import SuffixProposer

        return SuffixProposer(vocab)
    if source.kind == "assistant":
        from ...proposers.draft_model import DraftModelProposer

        greedy = sampling is None or sampling.greedy
        return DraftModelProposer(source.value, target_tokenizer=tokenizer,
                                  draft_tokenizer=assistant_tokenizer if assistant_tokenizer is not None else tokenizer,
                                  mode="greedy" if greedy else "sample", sampling=None if greedy else sampling,
                                  target_vocab_size=vocab)
    check_binding(source.value, model, tokenizer, allow_mismatch=allow_mismatch)
    return source.value


def check_binding(proposer, model, tokenizer, *, allow_mismatch: bool = False) -> None:
    """Refuse a proposer object bound to another target checkpoint or tokenizer than this call's."""
    from ...artifacts import IncompatibleArtifactError, target_fingerprint, tokenizer_fingerprint

    art = proposer.artifact
    if art.bound_to == "nothing":
        return
    have = target_fingerprint(model) if art.bound_to == "target" else tokenizer_fingerprint(tokenizer)
    if have == art.fingerprint:
        return
    msg = (f"proposer {art.name!r} is bound to the {art.bound_to} {art.fingerprint}, but this call's "
           f"{art.bound_to} is {have}")
    if art.bound_to == "target" and allow_mismatch:
        warnings.warn(msg + " (allow_mismatch=True: drafting anyway; still exact, acceptance will suffer)",
                      RuntimeWarning, stacklevel=3)
        return
    raise IncompatibleArtifactError(msg + ": load it for this model (or pass allow_mismatch=True to draft "
                                    "anyway; outputs stay exact, acceptance collapses)" if art.bound_to == "target"
                                    else msg + ": a drafter must share the target's tokenizer exactly")


def _need_tokenizer(tokenizer, what: str) -> None:
    if tokenizer is None:
        raise ValueError(f"{what} needs the target's tokenizer, to check that the drafter shares its token ids: pass "
                         "target_tokenizer=<tokenizer> (transformers does not hand tokenizer= to a custom_generate "
                         "callable; the folder form takes tokenizer=)")
