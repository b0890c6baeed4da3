"""The :class:`~specdec.proposers.suffix.SuffixProposer`'s settings, in three frozen groups.

:class:`SuffixDrafting` (how a tree is grown from a match), :class:`SuffixGlobalCache` (the
per-tenant cache of past responses) and :class:`SuffixCalibration` (the match calibration's mode).
Each refuses a bad value with a ValueError naming ``Class.field``; numbers are stored as ``int`` /
``float`` / ``bool`` whatever numeric type they came as.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

MIN_CACHE_BYTES = 64 * 1024
COMBINE_MODES = ("longest", "pool")
CALIBRATION_MODES = ("online", "frozen", "off")


def _check(obj, name: str, kind: type, ok: bool, wants: str) -> None:
    """Store ``obj.name`` as ``kind`` if it is a number of that kind (bool only for bool) and ``ok``
    holds, else ValueError ``"<Class>.<name> must be <wants>, got <value>"``."""
    value = getattr(obj, name)
    numeric = {bool: bool, int: numbers.Integral, float: numbers.Real}[kind]
    if not isinstance(value, numeric) or (kind is not bool and isinstance(value, bool)) or not ok:
        raise ValueError(f"{type(obj).__name__}.{name} must be {wants}, got {value!r}")
    object.__setattr__(obj, name, kind(value))


def _real(value) -> float:
    """``value`` as a float for range checks (NaN for a non-number, so every range check fails)."""
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan


@dataclasses.dataclass(frozen=True)
class SuffixDrafting:
    """How a draft tree is grown from the caches' matches.

    Attributes:
        min_match_len: a cache whose current match is shorter than this drafts nothing (>= 1).
        min_prob: nodes with estimated acceptance below this are not drafted (in [0, 1]).
        max_depth: hard cap on draft depth (>= 0); depth is also capped at ``ceil(depth_factor *
            match length)`` (``depth_factor <= 0`` disables that cap).
        combine: ``"longest"`` (the cache with the longer match drafts alone; ties go to the request
            cache) or ``"pool"`` (counts of both caches added).
        count_prior, global_count_prior: pseudo-count added to every continuation total when the
            request (or pooled) / global cache drafts: a continuation seen once reads
            ``1 / (1 + prior)`` (finite, >= 0; 0: plain frequencies).
        rematch_window: tokens re-matched against a global cache rebuilt under a request (>= 1).
    """

    min_match_len: int = 1
    min_prob: float = 0.05
    max_depth: int = 32
    depth_factor: float = 4.0
    combine: str = "longest"
    count_prior: float = 0.0
    global_count_prior: float = 0.0
    rematch_window: int = 1024

    def __post_init__(self):
        _check(self, "min_match_len", int, _real(self.min_match_len) >= 1, "an int >= 1")
        _check(self, "min_prob", float, 0.0 <= _real(self.min_prob) <= 1.0, "a number in [0, 1]")
        _check(self, "max_depth", int, _real(self.max_depth) >= 0, "an int >= 0")
        _check(self, "depth_factor", float, not math.isnan(_real(self.depth_factor)), "a number")
        for name in ("count_prior", "global_count_prior"):
            _check(self, name, float, 0.0 <= _real(getattr(self, name)) < math.inf, "finite and >= 0")
        _check(self, "rematch_window", int, _real(self.rematch_window) >= 1, "an int >= 1")
        if self.combine not in COMBINE_MODES:
            raise ValueError(f"SuffixDrafting.combine must be 'longest' or 'pool', got {self.combine!r}")


@dataclasses.dataclass(frozen=True)
class SuffixGlobalCache:
    """The global cache: finished responses per tenant partition, each under a byte cap.

    Attributes:
        use_global: consult and fill the global cache.
        freeze_global: stop filling it from ended requests (``warm`` still adds), so seeded runs
            draft alike; it also makes :class:`SuffixCalibration`'s default mode ``"frozen"``.
        global_cache_bytes: cap per tenant partition (>= 64 KiB).
        max_partitions: partitions kept, least recently used dropped first (>= 1).
        index_prompts: index prompts too, not only responses.
        share_across_tenants: one partition for all tenants (acceptance timing then leaks across them).
    """

    use_global: bool = True
    freeze_global: bool = False
    global_cache_bytes: int = 256 << 20
    max_partitions: int = 64
    index_prompts: bool = False
    share_across_tenants: bool = False

    def __post_init__(self):
        for name in ("use_global", "freeze_global", "index_prompts", "share_across_tenants"):
            _check(self, name, bool, True, "a bool")
        _check(self, "global_cache_bytes", int, _real(self.global_cache_bytes) >= MIN_CACHE_BYTES,
               f"an int >= {MIN_CACHE_BYTES}")
        _check(self, "max_partitions", int, _real(self.max_partitions) >= 1, "an int >= 1")


@dataclasses.dataclass(frozen=True)
class SuffixCalibration:
    """The match calibration: each conditional scaled by how its cell (cache, match length,
    evidence, share) fared on committed tokens.

    Attributes:
        mode: ``"online"`` (learn and apply), ``"frozen"`` (apply the table learnt so far, never
            update), ``"off"`` (raw frequencies) or None: ``"frozen"`` under
            ``SuffixGlobalCache.freeze_global``, else ``"online"`` (:meth:`resolved`).
        prior: pseudo-observations behind each cell's ratio (finite, > 0).
    """

    mode: str | None = None
    prior: float = 4.0

    def __post_init__(self):
        if self.mode is not None and self.mode not in CALIBRATION_MODES:
            raise ValueError(f"SuffixCalibration.mode must be 'online', 'frozen', 'off' or None, got {self.mode!r}")
        _check(self, "prior", float, 0.0 < _real(self.prior) < math.inf, "finite and > 0")

    def resolved(self, cache: SuffixGlobalCache) -> "SuffixCalibration":
        """This calibration with ``mode`` set (None replaced by the default for ``cache``)."""
        if self.mode is not None:
            return self
        return dataclasses.replace(self, mode="frozen" if cache.freeze_global else "online")
