"""The ``specdec`` command: one sub-command per module, each exposing ``register(subparsers)``.

A command module's ``register`` adds its sub-parser and sets ``func`` (``func(args) -> int``) as the
parser default. Adding a command means adding its module to :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = (
    "specdec.commands.generate",
    "specdec.commands.bench",
    "specdec.serving.commands",
    "specdec.training.commands",
    "specdec.check",
)


def build_parser(modules=COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="Speculative decoding: generate, benchmark, plan.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
