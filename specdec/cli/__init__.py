"""The ``specdec`` command: one module per sub-command, each exposing ``register(subparsers)``.

A command module's ``register`` adds its sub-parser and sets ``func`` (``func(args) -> int``) as the
parser default. Adding a command means adding its module to :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = (
    "specdec.cli.generate",
    "specdec.cli.bench",
    "specdec.cli.plan",
    "specdec.cli.review",
    "specdec.cli.train",
    "specdec.cli.check",
)


def build_parser(modules=COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="Speculative decoding: generate, benchmark, plan.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # recorded in trained artifacts' manifests as the command that made them
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
