"""The engine adapter protocol, and :class:`CallableEngine`, the documented adapter for any other engine.

An audit hands an :class:`Engine` :class:`Job` s, once with speculation and once without, and gets back one
:class:`Samples`, :class:`Refused` or :class:`EngineFailed` per job. Usage: docs/audit.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence, runtime_checkable

from .settings import Sampling


class Refused(Exception):
    """The engine declined a setting. ``str(exc)`` is the engine's own message; ``by`` says who
    declined: ``"engine"`` (the engine raised) or ``"adapter"`` (the engine has no such knob)."""

    def __init__(self, message: str, *, by: str = "engine"):
        super().__init__(message)
        self.by = by


class EngineFailed(Exception):
    """The engine broke while running a setting it had accepted (a crash, not a refusal)."""


@dataclass(frozen=True)
class Job:
    """One setting's requests for one arm: ``prompts`` (a mixed setting lists each once per part), one
    ``sampling`` per prompt, ``n`` completions per prompt (``n / sampling.n`` requests), the arm's ``seed``."""

    prompts: tuple[tuple[int, ...], ...]
    sampling: tuple[Sampling, ...]
    n: int
    seed: int

    def __post_init__(self):
        if len(self.prompts) != len(self.sampling) or not self.prompts:
            raise ValueError("a Job needs one Sampling per prompt and at least one prompt")
        if self.n < 1:
            raise ValueError(f"Job.n must be >= 1, got {self.n}")
        for s in self.sampling:
            if self.n % s.n:
                raise ValueError(f"Job.n = {self.n} is not a multiple of Sampling.n = {s.n}")

    @property
    def outputs(self) -> int:
        """Completions in the whole job (the span of seeds it may use)."""
        return self.n * len(self.prompts)


def request_seed(seed: int, request: int, n: int = 1) -> int:
    """``seed + request * n``: the stride ``n`` keeps every output's seed distinct (vLLM seeds output ``i``
    of an ``n > 1`` request with ``seed + i``)."""
    return seed + request * n


def check_independent(jobs_a: Sequence[Job], jobs_b: Sequence[Job]) -> None:
    """Raise ValueError when two arms' seed ranges ``[seed, seed + outputs)`` overlap (equal seeds correlate
    the arms and blind the two-sample test)."""
    for a in jobs_a:
        for b in jobs_b:
            if a.seed < b.seed + b.outputs and b.seed < a.seed + a.outputs:
                raise ValueError(
                    f"the speculative and plain arms share seeds ([{a.seed}, {a.seed + a.outputs}) and "
                    f"[{b.seed}, {b.seed + b.outputs})): equal seeds correlate the arms and blind the two-sample "
                    "test; give them disjoint seeds")


@dataclass
class Samples:
    """What one job produced: ``outputs[i][j]``, completion ``j`` of prompt ``i`` (stop token kept); draft
    tokens ``drafted`` / ``accepted`` over the job (None: unknown, so never *exact*); ``requests`` made;
    ``extra`` measurements for the JSON report."""

    outputs: list[list[list[int]]]
    drafted: int | None = None
    accepted: int | None = None
    requests: int | None = None
    extra: dict = field(default_factory=dict)

    def check(self, job: Job) -> None:
        """Raise ValueError unless there are ``job.n`` completions for each of the job's prompts."""
        if len(self.outputs) != len(job.prompts) or any(len(o) != job.n for o in self.outputs):
            shape = [len(o) for o in self.outputs]
            raise ValueError(f"the engine returned {shape} completions per prompt; {job.n} for each of "
                             f"{len(job.prompts)} prompts were asked for")


Outcome = "Samples | Refused | EngineFailed"


def run_each(jobs: Sequence[Job], run_one: Callable[[Job], Samples], *, refuse: tuple = (),
             fail: tuple = ()) -> list:
    """One outcome per job, in order: ``run_one(job)``, or the :class:`Refused` it raised, or an exception of a
    ``refuse`` type as ``Refused`` (by the engine), or one of a ``fail`` type as :class:`EngineFailed`; both
    messages ``"<type>: <message>"``. Any other exception propagates."""
    out = []
    for job in jobs:
        try:
            out.append(run_one(job))
        except Refused as exc:
            out.append(exc)
        except refuse as exc:
            out.append(Refused(f"{type(exc).__name__}: {exc}"))
        except fail as exc:
            out.append(EngineFailed(f"{type(exc).__name__}: {exc}"))
    return out


@runtime_checkable
class Engine(Protocol):
    """An engine under audit: its ``name``, speculative ``method``, and ``profile``, the name of its processing
    order in :data:`~specdec.conformance.audit.processing.PROFILES`."""

    name: str
    method: str
    profile: str

    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        """One outcome per job (:class:`Samples`, :class:`Refused` or :class:`EngineFailed`), same order."""

    def describe(self) -> dict:
        """Versions and configuration, for the report."""


class CallableEngine:
    """:class:`Engine` over ``fn(prompts, sampling, n, seed, speculative)`` returning ``outputs[i][j]`` or
    :class:`Samples`; ``fn`` raises :class:`Refused` for a setting the engine declines (docs/audit.md)."""

    def __init__(self, fn: Callable, *, name: str = "callable", method: str = "speculative", profile: str = "vllm",
                 info: dict | None = None):
        from .processing import profile as check_profile

        if not callable(fn):
            raise TypeError(f"CallableEngine needs a callable, got {type(fn).__name__}")
        check_profile(profile)
        self.fn, self.name, self.method, self.profile = fn, name, method, profile
        self.info = dict(info or {})

    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        out = []
        for job in jobs:
            try:
                res = self.fn([list(p) for p in job.prompts], list(job.sampling), job.n, job.seed, speculative)
            except Refused as exc:
                out.append(exc)
                continue
            except Exception as exc:  # the engine broke: a finding, recorded with its message
                out.append(EngineFailed(f"{type(exc).__name__}: {exc}"))
                continue
            samples = res if isinstance(res, Samples) else Samples([[list(t) for t in o] for o in res])
            samples.check(job)
            out.append(samples)
        return out

    def describe(self) -> dict:
        return {"engine": self.name, "method": self.method, "profile": self.profile, **self.info}
