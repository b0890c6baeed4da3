"""Deprecated path (kept for one release): moved to :mod:`specdec.cli.plan`, :mod:`specdec.cli.review`."""

from .._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.cli.plan", "specdec.cli.review", "specdec.cli")


if __name__ == "__main__":
    from specdec.cli import main

    raise SystemExit(main())
