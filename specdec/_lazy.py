"""Names a package re-exports without importing their modules until first use.

Why: ``import specdec`` (and ``specdec.engine``, ``specdec.proposers``) must stay cheap and work
before the compiled extension is built; the classes that need the extension or transformers load
when they are first looked up.
"""

from __future__ import annotations

import importlib
from typing import Mapping


def lazy_names(package: str, table: Mapping[str, str], eager: tuple[str, ...] = ()):
    """``(__getattr__, __dir__)`` for ``package``: ``table`` maps each lazy name to the module that
    defines it; ``eager`` lists the names the package already imports (for ``__dir__``)."""

    def __getattr__(name: str):
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*eager, *table})

    return __getattr__, __dir__
