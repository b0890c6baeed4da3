"""Engine-neutral sampling settings of an audit (:class:`Sampling`, :class:`Mixed`), and their catalogue.

An adapter maps a :class:`Sampling` onto its engine's parameters, or raises
:class:`~specdec.conformance.audit.engine.Refused` when the engine (or the adapter) cannot run it.
:data:`SETTINGS` names the settings a default audit runs, :data:`QUICK` those of ``--quick``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Sequence


@dataclass(frozen=True)
class Sampling:
    """One request's sampling settings; each knob's default is off. ``temperature`` 0 only for greedy runs;
    ``stop_tokens`` end an output after the stop token (kept); ``n`` outputs per request; ``seeded``: a seed per
    request; ``max_tokens``: set by the audit. Knob semantics: docs/audit.md, "Processing steps"."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    allowed_tokens: tuple[int, ...] | None = None
    bad_tokens: tuple[int, ...] = ()
    stop_tokens: tuple[int, ...] = ()
    n: int = 1
    seeded: bool = False
    max_tokens: int = 5

    def __post_init__(self):
        def number(name, value, ok, what):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not ok(value):
                raise ValueError(f"Sampling.{name} must be {what}, got {value!r}")

        number("temperature", self.temperature, lambda v: v >= 0, "a finite number >= 0")
        number("top_p", self.top_p, lambda v: 0 < v <= 1, "in (0, 1]")
        number("min_p", self.min_p, lambda v: 0 <= v < 1, "in [0, 1)")
        number("repetition_penalty", self.repetition_penalty, lambda v: v > 0, "> 0")
        number("presence_penalty", self.presence_penalty, lambda v: True, "a finite number")
        number("frequency_penalty", self.frequency_penalty, lambda v: True, "a finite number")
        for name in ("top_k", "n", "max_tokens"):
            v = getattr(self, name)
            if v is None and name == "top_k":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Sampling.{name} must be an int >= 1{' or None' if name == 'top_k' else ''}, "
                                 f"got {v!r}")
        for name in ("allowed_tokens", "bad_tokens", "stop_tokens"):
            v = getattr(self, name)
            if v is None:
                continue
            if not isinstance(v, tuple) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in v):
                raise ValueError(f"Sampling.{name} must be a tuple of token ids >= 0, got {v!r}")
        if self.allowed_tokens is not None and not self.allowed_tokens:
            raise ValueError("Sampling.allowed_tokens must not be empty (None allows every token)")
        if not isinstance(self.logit_bias, tuple) or any(
                not (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], int) and p[0] >= 0
                     and isinstance(p[1], (int, float)) and math.isfinite(p[1])) for p in self.logit_bias):
            raise ValueError(f"Sampling.logit_bias must be ((token, finite bias), ...), got {self.logit_bias!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def check_vocab(self, vocab: int) -> None:
        """Raise ValueError if a token id is outside ``[0, vocab)`` or top-k exceeds it."""
        ids = [t for t, _ in self.logit_bias] + list(self.allowed_tokens or ()) + list(self.bad_tokens) + list(
            self.stop_tokens)
        bad = sorted({t for t in ids if t >= vocab})
        if bad:
            raise ValueError(f"token ids {bad} are outside the vocabulary of {vocab}")
        if self.allowed_tokens is not None and set(self.allowed_tokens) <= set(self.bad_tokens):
            raise ValueError("every allowed token is also a bad token: nothing could be sampled")

    def describe(self) -> str:
        """The settings that differ from the defaults, as ``name=value`` (max_tokens left out)."""
        base = Sampling()
        parts = [f"{f}={getattr(self, f)!r}" for f in self.__dataclass_fields__
                 if f != "max_tokens" and getattr(self, f) != getattr(base, f)]
        return ", ".join(parts) or "temperature=1.0"


@dataclass(frozen=True)
class Mixed:
    """A batch whose requests carry different settings: request ``i`` gets ``parts[i % len(parts)]``."""

    parts: tuple[Sampling, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if len(self.parts) < 2 or not all(isinstance(p, Sampling) for p in self.parts):
            raise ValueError("Mixed needs at least two Sampling parts")

    def describe(self) -> str:
        return " | ".join(p.describe() for p in self.parts)


Setting = "Sampling | Mixed"


def parts_of(setting) -> tuple[Sampling, ...]:
    """The distinct settings a case's requests carry (one for a plain setting)."""
    return setting.parts if isinstance(setting, Mixed) else (setting,)


def with_length(setting, length: int):
    """``setting`` with ``max_tokens = length`` on every part."""
    if isinstance(setting, Mixed):
        return Mixed(tuple(replace(p, max_tokens=length) for p in setting.parts))
    return replace(setting, max_tokens=length)


def _catalogue() -> dict:
    t = Sampling(temperature=0.8)
    return {
        "temperature": t,
        "top_k": Sampling(temperature=0.9, top_k=3),
        "top_p": Sampling(temperature=1.0, top_p=0.8),
        "min_p": Sampling(temperature=1.0, min_p=0.2),
        "repetition_penalty": Sampling(temperature=0.9, repetition_penalty=1.6),
        "presence_penalty": Sampling(temperature=0.9, presence_penalty=1.0),
        "frequency_penalty": Sampling(temperature=0.9, frequency_penalty=0.7),
        "logit_bias": Sampling(temperature=0.9, logit_bias=((2, 1.5), (4, -1.0))),
        "allowed_tokens": Sampling(temperature=0.9, allowed_tokens=(0, 2, 3, 5, 6, 7)),
        "bad_tokens": Sampling(temperature=0.9, bad_tokens=(7,)),
        "stop_tokens": Sampling(temperature=0.9, stop_tokens=(3,)),
        "n4": Sampling(temperature=0.9, n=4),
        "seeded": Sampling(temperature=0.9, seeded=True),
        "mixed": Mixed((Sampling(temperature=0.6), Sampling(temperature=1.1, top_k=4),
                        Sampling(temperature=0.9, repetition_penalty=1.6), Sampling(temperature=1.0, top_p=0.7))),
    }


SETTINGS: "MappingProxyType[str, Sampling | Mixed]" = MappingProxyType(_catalogue())
"""Every setting a default audit runs, by name. Token ids assume a vocabulary of at least 8 (the
audit target's): token 6 is the target's favourite, so bans and stops avoid it and drafts land."""

QUICK: tuple[str, ...] = ("temperature", "top_k", "repetition_penalty", "mixed")
"""The settings ``--quick`` runs: the plain law, a truncation, a context-dependent penalty, a mixed batch."""


def select(names: Sequence[str] | None, *, quick: bool = False) -> dict:
    """``{name: setting}`` for ``names`` (None: :data:`QUICK` if ``quick`` else all), in catalogue order.

    Raises ValueError naming unknown settings.
    """
    if names is None:
        names = QUICK if quick else tuple(SETTINGS)
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}; known: {', '.join(SETTINGS)}")
    return {n: SETTINGS[n] for n in SETTINGS if n in set(names)}
