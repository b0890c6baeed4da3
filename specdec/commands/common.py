"""Pieces shared by sub-commands: loading the target and building proposers by name."""

from __future__ import annotations

import argparse

#: Proposer specs every command accepts (the same strings as ``specdec plan --proposer``).
PROPOSER_SPECS = ("none | suffix | suffix:<responses .jsonl to warm its cache> | draft:<model dir> | "
                  "medusa:<artifact dir> | eagle:<artifact dir> | hybrid:suffix+eagle:<artifact dir>")


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None,
                   help="Hugging Face model folder or id (offline); default: the embedded SmolLM2-135M-Instruct")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def add_budget_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", default="auto",
                   help="draft nodes verified per step: 'auto' (measured cost model, calibrated at start) or an int")


def parse_budget(text: str):
    """``'auto'`` or a non-negative int, else SystemExit naming the flag."""
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise SystemExit(f"--budget must be 'auto' or an int >= 0, got {text!r}")
    return value


def load_target(args):
    """``(model, tokenizer)`` from ``--model`` or the embedded default."""
    import torch

    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.model is None:
        from ..models import load_default

        return load_default()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, local_files_only=True).eval()
    return model, AutoTokenizer.from_pretrained(args.model, local_files_only=True)


def check_spec(spec: str) -> str:
    """Syntax check of a proposer spec before any model is loaded (SystemExit naming it)."""
    kind, sep, arg = spec.partition(":")
    if (spec in ("none", "suffix")) or (kind in ("suffix", "draft", "medusa", "eagle") and sep and arg):
        return spec
    if kind == "hybrid" and arg.startswith("suffix+eagle:") and arg[len("suffix+eagle:"):]:
        return spec
    raise SystemExit(f"unknown proposer spec {spec!r}; expected {PROPOSER_SPECS}")


def make_proposer(spec: str, model, tokenizer=None):
    """A fresh proposer from a spec (see :data:`PROPOSER_SPECS`; ``none`` = plain decoding, None).

    Raises:
        SystemExit: naming the spec when it is unknown or its artifact cannot be loaded.
    """
    if spec == "none":
        return None
    from ..serving.measure import make_proposer as from_spec

    try:
        return from_spec(spec, model, tokenizer)
    except ValueError as exc:
        raise SystemExit(f"proposer {spec!r}: {exc} (expected {PROPOSER_SPECS})") from exc
