"""Version floors of optional dependencies, checked where the code that needs them starts.

Why: transformers is an extra (``specdec[hf]``), not a dependency, so that specdec installs into
an engine's environment (vLLM pins an older transformers) for the parts that need no Hugging Face
model: the suffix proposer, the vLLM drafter, the sampler and the serving tools. The Hugging Face
verify path needs a newer transformers than such an environment may hold; it says so on entry
instead of failing deep inside a forward.
"""

from __future__ import annotations

import re

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
