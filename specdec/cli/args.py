"""Argument checks every ``specdec`` command shares: one line naming the problem, exit 2, before any
model loads.

Checks are argparse ``type`` s or run first in a command; later errors are printed the same way by
:func:`specdec.cli.main` (``SPECDEC_DEBUG=1``: the traceback).
"""

from __future__ import annotations

import argparse
import math
import os

#: Proposer specs every command accepts (the same grammar in generate, bench, plan and check).
PROPOSER_SPECS = ("none | suffix | suffix:<responses .jsonl to warm its cache> | draft:<model dir> | "
                  "medusa:<artifact dir> | eagle:<artifact dir> | hybrid:suffix+eagle:<artifact dir>")
_WITH_DIR = ("draft", "medusa", "eagle")


class UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def _number(text: str, kind, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def bounded(kind, lo=None, hi=None, *, lo_open: bool = False, what: str | None = None):
    """An argparse type: ``kind(text)`` within ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""
    name = what or ("an integer" if kind is int else "a number")

    def check(text: str):
        value = _number(text, kind, name)
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise argparse.ArgumentTypeError(f"must be {'>' if lo_open else '>='} {lo}, got {value}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi}, got {value}")
        return value

    return check


positive_int = bounded(int, 1)
non_negative_int = bounded(int, 0)
non_negative = bounded(float, 0.0)
positive = bounded(float, 0.0, lo_open=True)
probability = bounded(float, 0.0, 1.0, lo_open=True)  # (0, 1]
unit = bounded(float, 0.0, 1.0)  # [0, 1]


def budget(text: str):
    """``'auto'`` or an int >= 0."""
    if text == "auto":
        return "auto"
    value = _number(text, int, "'auto' or an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 'auto' or an int >= 0, got {value}")
    return value


def model_spec(text: str) -> str:
    """``default``, an existing model directory or ``.gguf`` file, or a model id (``org/name``)."""
    if text == "default":
        return text
    if text.endswith(".gguf"):
        if not os.path.isfile(text):
            raise argparse.ArgumentTypeError(f"no such GGUF file: {text!r}")
        return text
    looks_like_path = text.startswith(("/", ".", "~")) or os.sep in text.rstrip(os.sep) and text.count("/") != 1
    if os.path.isdir(text) or not looks_like_path:
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is neither 'default', a .gguf file, a model directory nor a model id "
                                     "(models load offline, from disk or the local cache)")


def proposer_spec(text: str) -> str:
    """A proposer spec (:data:`PROPOSER_SPECS`) whose file or directory exists."""
    kind, sep, arg = text.partition(":")
    if text in ("none", "suffix"):
        return text
    if kind == "suffix" and sep and arg:
        if not os.path.isfile(arg):
            raise argparse.ArgumentTypeError(f"{text}: no such responses file {arg!r}")
        return text
    if kind == "hybrid" and arg.startswith("suffix+eagle:"):
        kind, arg = "eagle", arg[len("suffix+eagle:"):]
    if kind in _WITH_DIR and sep and arg:
        if not os.path.isdir(arg):
            raise argparse.ArgumentTypeError(f"{text}: no such directory {arg!r}")
        return text
    raise argparse.ArgumentTypeError(f"unknown proposer spec {text!r}; expected {PROPOSER_SPECS}")


def csv(text: str) -> list[str]:
    """A comma-separated list without empty items."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, got nothing")
    return items


def add_model_args(p: argparse.ArgumentParser, *, default: str | None = "default") -> None:
    """``--model`` (alias ``--target``) and ``--threads``: the same names in every command."""
    p.add_argument("--model", "--target", dest="model", type=model_spec, default=default,
                   help="'default' (the embedded SmolLM2-135M-Instruct), a Hugging Face model directory or a .gguf "
                        "file (offline)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's choice)")


def add_proposer_args(p: argparse.ArgumentParser, *, default: list[str]) -> None:
    """``--proposer SPEC`` (repeatable) and ``--proposers A,B`` (the same, comma-separated), plus
    ``--allow-mismatch`` for artifacts bound to another checkpoint."""
    p.add_argument("--proposer", dest="proposer_list", action="append", type=proposer_spec, metavar="SPEC",
                   help=f"proposer spec, repeatable: {PROPOSER_SPECS} (default: {','.join(default)})")
    p.add_argument("--proposers", dest="proposer_csv", type=lambda t: [proposer_spec(s) for s in csv(t)],
                   metavar="A,B", help="the same as several --proposer, comma-separated")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="use artifacts built for another target or tokenizer (drafts stay exact; acceptance "
                        "usually collapses): warns loudly")
    p.set_defaults(proposer_default=default)


def proposers(args) -> list[str]:
    """The proposer specs of :func:`add_proposer_args`, in command-line order."""
    return (args.proposer_list or []) + (args.proposer_csv or []) or list(args.proposer_default)
