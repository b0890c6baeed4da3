"""The engine adapter protocol, and the documented callable adapter for any other engine.

An audit talks to an engine through :class:`Engine`: it hands over :class:`Job` s (prompts, one
:class:`~specdec.conformance.audit.settings.Sampling` per prompt, completions per prompt, a seed)
once with speculation and once without, and gets back, per job, :class:`Samples` (the token lists,
and what the engine says it drafted and accepted), :class:`Refused` (the engine declined the
setting: its own message) or :class:`EngineFailed` (it broke mid-run). Jobs of one arm come in
one call so an adapter can serve them all from one engine (vLLM's adapter starts one engine per
arm, in its own process).

Any engine can be audited through :class:`CallableEngine`, which wraps a function::

    def my_engine(prompts, sampling, n, seed, speculative):
        # prompts: list of token-id lists; sampling: one Sampling per prompt (mixed batches carry
        # different ones: submit them together); n: completions wanted per prompt; seed: this
        # arm's seed (derive per-request seeds with request_seed when Sampling.seeded);
        # speculative: run with or without speculation, everything else the same.
        ...
        return outputs   # outputs[i][j]: completion j of prompt i, a list of token ids
        # or Samples(outputs, drafted=..., accepted=..., requests=...) to report acceptance

    report = audit(CallableEngine(my_engine, name="mine", profile="vllm"), model, config)

Without drafted/accepted counts an audit cannot tell whether drafts ever landed, so it reports
such a case *inconclusive*, never *exact*. Raise :class:`Refused` with the engine's message for a
setting the engine declines.
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
    """One setting's requests for one arm.

    Attributes:
        prompts: token-id prompts (a mixed setting lists each prompt once per part).
        sampling: one :class:`Sampling` per prompt.
        n: completions wanted per prompt (an adapter makes ``n / sampling.n`` requests per prompt
            when the engine runs ``sampling.n`` outputs per request).
        seed: the arm's seed; per-request seeds are :func:`request_seed` of it.
    """

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
    """The seed of request ``request`` (0-based in a job) whose request makes ``n`` outputs:
    ``seed + request * n``. vLLM seeds output ``i`` of an ``n > 1`` request with ``seed + i``, so a
    stride of ``n`` keeps every output's seed distinct; a stride of 1 would give requests
    ``r`` and ``r + 1`` shared seeds, and correlated samples the G test counts as independent."""
    return seed + request * n


def check_independent(jobs_a: Sequence[Job], jobs_b: Sequence[Job]) -> None:
    """Raise ValueError when two arms' seed ranges ``[seed, seed + outputs)`` overlap.

    Equal seeds draw the same random numbers in both arms: the first token (sampled from the
    prefill, before any draft) is then identical in both, the arms are correlated, and the
    two-sample test, which assumes independent samples, goes blind to the difference it exists to see.
    """
    for a in jobs_a:
        for b in jobs_b:
            if a.seed < b.seed + b.outputs and b.seed < a.seed + a.outputs:
                raise ValueError(
                    f"the speculative and plain arms share seeds ([{a.seed}, {a.seed + a.outputs}) and "
                    f"[{b.seed}, {b.seed + b.outputs})): equal seeds correlate the arms and blind the two-sample "
                    "test; give them disjoint seeds")


@dataclass
class Samples:
    """What one job produced.

    Attributes:
        outputs: ``outputs[i][j]``: completion ``j`` of prompt ``i`` (token ids, stop token kept).
        drafted / accepted: draft tokens the engine verified / accepted over the job; None when
            the engine does not say (then no case can be *exact*).
        requests: engine requests made (``n > 1`` settings make fewer requests than outputs).
        extra: anything else the adapter measured (shown in the JSON report).
    """

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


@runtime_checkable
class Engine(Protocol):
    """An engine under audit.

    Attributes:
        name: the engine (``"vllm"``, ``"hf"``, ...).
        method: the speculative method (``"ngram"``, ``"draft_model"``, ...).
        profile: the name of its processing order in
            :data:`~specdec.conformance.audit.processing.PROFILES` (the law is computed with it).
    """

    name: str
    method: str
    profile: str

    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        """One outcome per job (:class:`Samples`, :class:`Refused` or :class:`EngineFailed`), same order."""

    def describe(self) -> dict:
        """Versions and configuration, for the report."""


class CallableEngine:
    """:class:`Engine` over ``fn(prompts, sampling, n, seed, speculative)`` (see the module docstring)."""

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
