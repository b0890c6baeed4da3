"""Deprecated path (kept for one release): moved to :mod:`specdec.conformance.report`."""

from ._compat import moved

__getattr__, __dir__ = moved(__name__, "specdec.conformance.report")


if __name__ == "__main__":
    from specdec.conformance.report import main

    raise SystemExit(main())
