"""Proposers by spec string: the one factory the CLI, the planner and the integrations share.

Specs: ``suffix`` (:class:`~specdec.proposers.suffix.SuffixProposer`), ``suffix:<responses .jsonl>``
(its global cache warmed, ids from this tokenizer), ``draft:<model path>`` (a draft model sharing the
tokenizer), ``medusa:<artifact dir>``, ``eagle:<artifact dir>`` and ``hybrid:suffix+eagle:<artifact
dir>`` (bound to the target checkpoint; they read its hidden states).
"""

from __future__ import annotations

from pathlib import Path


def make_proposer(spec: str, model, tokenizer, *, allow_mismatch: bool = False, head_dtype: str | None = None):
    """A fresh proposer from a spec string; ``allow_mismatch`` loads artifacts of another checkpoint
    (warning); ``head_dtype``: :class:`~specdec.proposers.reduced_vocab.DraftHead` (refused without one)."""
    vocab = int(model.get_output_embeddings().weight.shape[0])
    kind, _, arg = spec.partition(":")
    if head_dtype is not None:  # refused before any artifact is read
        from .reduced_vocab import check_head_dtype

        check_head_dtype(head_dtype)
        if kind not in ("medusa", "eagle", "hybrid"):
            raise ValueError(f"head_dtype={head_dtype!r} applies to medusa, eagle and hybrid proposers, not {spec!r}")
    if spec == "suffix" or (kind == "suffix" and arg):
        from .suffix import SuffixProposer, read_documents

        prop = SuffixProposer(vocab)
        if arg:
            prop.warm(read_documents(arg))
        return prop
    if kind == "draft" and arg:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from .draft_model import DraftModelProposer

        if not Path(arg).exists():
            raise ValueError(f"draft model directory {arg!r} does not exist")
        draft = AutoModelForCausalLM.from_pretrained(arg, local_files_only=True).eval()
        return DraftModelProposer(draft, target_tokenizer=tokenizer, draft_tokenizer=AutoTokenizer.from_pretrained(arg),
                                  target_vocab_size=vocab)
    if kind in ("medusa", "eagle") and arg:
        from .eagle import EagleProposer
        from .heads import MedusaProposer

        from ..artifacts import DraftingOptionError, IncompatibleArtifactError
        from .reduced_vocab import HeadDtypeError

        cls = MedusaProposer if kind == "medusa" else EagleProposer
        try:
            return cls.load(arg, model, allow_mismatch=allow_mismatch, head_dtype=head_dtype)
        except (IncompatibleArtifactError, HeadDtypeError, DraftingOptionError):
            raise
        except (RuntimeError, KeyError, TypeError, ValueError) as exc:  # state-dict errors, a config field missing
            if str(arg) in str(exc):  # already names its file
                raise
            raise ValueError(f"{arg}: the artifact does not load: the weights do not fit the config in its "
                             f"manifest.json ({type(exc).__name__}: {exc})") from exc
    if kind == "hybrid" and arg.startswith("suffix+eagle:") and arg[len("suffix+eagle:"):]:
        from .eagle import EagleProposer
        from .hybrid import HybridProposer
        from .suffix import SuffixProposer

        eagle = EagleProposer.load(arg[len("suffix+eagle:"):], model, allow_mismatch=allow_mismatch,
                                   head_dtype=head_dtype)
        return HybridProposer(SuffixProposer(vocab), eagle)
    raise ValueError(
        f"unknown proposer spec {spec!r}; expected 'suffix', 'suffix:<responses .jsonl>', 'draft:<model dir>', "
        "'medusa:<artifact dir>', 'eagle:<artifact dir>' or 'hybrid:suffix+eagle:<artifact dir>'"
    )
