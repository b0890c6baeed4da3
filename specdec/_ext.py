"""Loads the compiled extension ``specdec._C`` once and says why when it is unavailable.

Importing ``torch`` first is required: the extension links against libtorch.
"""

import functools
import importlib

import torch  # noqa: F401  (loads libtorch before the extension)


@functools.lru_cache(maxsize=None)
def load():
    """Return the ``specdec._C`` module, or raise ImportError with the build command."""
    try:
        return importlib.import_module("specdec._C")
    except ImportError as exc:
        raise ImportError(
            "specdec._C (the compiled extension) is not built: run "
            "`pip install --no-build-isolation -e .` in the specdec checkout "
            f"(original error: {exc})"
        ) from exc


def available() -> bool:
    """True when the compiled extension can be imported."""
    try:
        load()
    except ImportError:
        return False
    return True
