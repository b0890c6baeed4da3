"""Imports that must stay cheap or optional: lazily re-exported names, and version floors.

Lazy, so ``import specdec`` stays cheap and works before the extension is built. Floors, because
transformers is an extra (``specdec[hf]``) so specdec installs beside an engine's older pin; the HF
verify path checks its floor on entry rather than failing inside a forward.
"""

from __future__ import annotations

import importlib
import re
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


TRANSFORMERS_MIN = (5, 24)
TRANSFORMERS_WHY = "the verify path passes cache= to the model's forward and builds DynamicCache(config=...)"


def _release(version: str) -> tuple[int, ...]:
    """The release numbers of a PEP 440 version: ``"5.19.1+cpu"`` -> ``(5, 19, 1)``, ``"5.24rc1"`` -> ``(5, 24)``."""
    m = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def require_transformers(what: str):
    """The ``transformers`` module, or ImportError naming ``what`` needs it, the floor and the extra."""
    floor = ".".join(map(str, TRANSFORMERS_MIN))
    try:
        import transformers
    except ImportError:
        raise ImportError(f"{what} needs transformers>={floor}, which is not installed: pip install 'specdec[hf]'") \
            from None
    found = getattr(transformers, "__version__", "0")
    if _release(found) < TRANSFORMERS_MIN:
        raise ImportError(f"{what} needs transformers>={floor} ({TRANSFORMERS_WHY}); this environment has {found}. "
                          "An engine's environment with an older pin (vLLM) can still run the suffix proposer and "
                          "the vLLM drafter, which need no transformers; run Hugging Face targets in a separate "
                          "environment with pip install 'specdec[hf]'")
    return transformers
