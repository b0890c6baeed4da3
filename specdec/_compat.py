"""Old module paths that moved in the 0.2 layout, kept importable for one release.

Each old module is a few lines that call :func:`moved`: its names resolve lazily in the new modules,
and every access warns with the new path, so code keeps working while it is being updated.
"""

from __future__ import annotations

import importlib
import warnings

REMOVED_IN = "0.3"


def moved(old: str, *new: str):
    """``(__getattr__, __dir__)`` for the old module ``old`` whose names now live in ``new``.

    A name is looked up in the new modules in order; the first that has it wins. Unknown names
    raise ``AttributeError`` naming where the module went.
    """
    if not new:
        raise ValueError(f"moved({old!r}) needs at least one new module")

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        for path in new:
            module = importlib.import_module(path)
            if hasattr(module, name):
                value = getattr(module, name)
                home = getattr(value, "__module__", None)  # where a class or function is defined
                home = home if isinstance(home, str) and home.startswith("specdec.") and "._" not in home else path
                warnings.warn(f"{old}.{name} moved to {home}.{name}; the old path goes away in specdec {REMOVED_IN}",
                              DeprecationWarning, stacklevel=2)
                return value
        raise AttributeError(f"module {old!r} has no attribute {name!r} (the module moved to {', '.join(new)})")

    def __dir__() -> list[str]:
        names: set[str] = set()
        for path in new:
            names.update(n for n in dir(importlib.import_module(path)) if not n.startswith("_"))
        return sorted(names)

    return __getattr__, __dir__
