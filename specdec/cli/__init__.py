"""The ``specdec`` command: one module per sub-command, each exposing ``register(subparsers)``.

``register`` adds the sub-parser and sets ``func(args) -> int``; commands are listed in
:data:`COMMAND_MODULES`. Mistakes end in one line on stderr and exit status 2 (arguments are checked
before any model loads; later ``ValueError`` / ``OSError`` print the same way; ``SPECDEC_DEBUG=1``
re-raises).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMAND_MODULES = (
    "specdec.cli.generate",
    "specdec.cli.bench",
    "specdec.cli.plan",
    "specdec.cli.review",
    "specdec.cli.train",
    "specdec.cli.check",
    "specdec.cli.audit",
)


def build_parser(modules=COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="Speculative decoding: generate, benchmark, plan.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None) -> int:
    from .args import UsageError

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)  # a bad value: usage + one error line, exit 2
    args.argv = argv  # recorded in trained artifacts' manifests as the command that made them
    try:
        return int(args.func(args) or 0)
    except (UsageError, ValueError, OSError) as exc:
        if os.environ.get("SPECDEC_DEBUG"):
            raise
        print(f"specdec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # a command that stopped with a message rather than a status
        if isinstance(exc.code, int) or exc.code is None or os.environ.get("SPECDEC_DEBUG"):
            raise
        print(f"specdec {args.command}: error: {exc.code}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
