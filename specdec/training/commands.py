"""Deprecated path (kept for one release): moved to :mod:`specdec.cli.train`."""

from .._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.cli.train", "specdec.cli")


if __name__ == "__main__":
    from specdec.cli import main

    raise SystemExit(main())
