"""The audit loop: every setting through the engine with and without speculation, tested, decided.

Every test of the audit (3 kinds x windows x settings) runs at ``alpha / m`` (Bonferroni), so an exact
engine is reported biased somewhere with probability at most ``alpha``. The steps: docs/audit.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

from ..decoder_law import WINDOWS
from ..suite import FAMILY_ALPHA, GTestResult, window_law_tests
from .engine import Engine, EngineFailed, Job, Refused, Samples, check_independent
from .law import LogitTables, exact_law, pad_outputs
from .processing import profile as get_profile
from .settings import Mixed, Sampling, parts_of, with_length
from .stats import Power, detectable_tv, flattened, two_sample_tests, window_codes
from .verdict import Verdict, decide

_SEED_SPAN = 1 << 24
"""Seeds reserved per case and arm: a job's outputs must fit (checked)."""


@dataclass(frozen=True)
class AuditConfig:
    """What an audit runs: ``prompts`` (a stratum each), ``settings`` by name, ``samples`` per prompt, part and
    arm, ``length`` tokens tested in 1-based inclusive ``windows``, family ``alpha``, each arm's base seed
    (overlapping ranges refused), and the inconclusive thresholds ``min_accepted`` (per request) and ``max_tv``."""

    prompts: tuple[tuple[int, ...], ...]
    settings: Mapping[str, object]
    samples: int = 1000
    length: int = 5
    windows: tuple[tuple[int, int], ...] = WINDOWS
    alpha: float = FAMILY_ALPHA
    seed: int = 0
    plain_seed: int | None = None
    min_accepted: float = 0.25
    max_tv: float = 0.1
    power_replicates: int = 30

    def check(self, vocab: int) -> None:
        """Raise ValueError for anything the audit cannot run, before any engine starts."""
        if not self.prompts or any(not p for p in self.prompts):
            raise ValueError("an audit needs at least one non-empty prompt")
        bad = [p for p in self.prompts if min(p) < 0 or max(p) >= vocab]
        if bad:
            raise ValueError(f"prompt {list(bad[0])} holds token ids outside the model's vocabulary of {vocab}")
        if not self.settings:
            raise ValueError("an audit needs at least one setting")
        for name, s in self.settings.items():
            if not isinstance(s, (Sampling, Mixed)):
                raise TypeError(f"setting {name!r} must be a Sampling or Mixed, got {type(s).__name__}")
            for part in parts_of(s):
                part.check_vocab(vocab)
                if part.greedy:
                    raise ValueError(f"setting {name!r} is greedy: the law test needs temperature > 0 "
                                     "(greedy equality is greedy.check_greedy)")
                if self.samples % part.n:
                    raise ValueError(f"samples = {self.samples} is not a multiple of setting {name!r}'s n = {part.n}")
        if self.samples < 1 or self.length < 1:
            raise ValueError("samples and length must be >= 1")
        if any(not 1 <= a <= b <= self.length for a, b in self.windows) or not self.windows:
            raise ValueError(f"windows {self.windows} must satisfy 1 <= first <= last <= length = {self.length}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")

    @property
    def planned_tests(self) -> int:
        """Tests of the whole audit: 3 kinds (speculative, plain, two-sample) x windows x settings."""
        return 3 * len(self.windows) * len(self.settings)

    @property
    def per_test_alpha(self) -> float:
        return self.alpha / self.planned_tests


@dataclass
class CaseResult:
    """One (engine, method, setting) case: verdict, tests, acceptance, power."""

    setting: str
    description: str
    verdict: Verdict
    message: str | None = None
    spec_tests: list[GTestResult] = field(default_factory=list)
    plain_tests: list[GTestResult] = field(default_factory=list)
    two_sample: list[GTestResult] = field(default_factory=list)
    power: Power | None = None
    observed_tv: dict = field(default_factory=dict)
    requests: int | None = None
    outputs: int = 0
    drafted: int | None = None
    accepted: int | None = None
    plain_outcome: str = "ran"
    extra: dict = field(default_factory=dict)

    @property
    def accepted_per_request(self) -> float | None:
        if self.accepted is None or not self.requests:
            return None
        return self.accepted / self.requests

    @property
    def min_p(self) -> float:
        return min((t.p_value for t in self.spec_tests + self.plain_tests + self.two_sample), default=1.0)


@dataclass
class AuditReport:
    """Every case of one engine and method, and what the audit ran with."""

    engine: dict
    config: AuditConfig
    cases: list[CaseResult]
    seconds: float
    laws: dict = field(default_factory=dict)
    greedy: object | None = None
    plain_outcomes: list = field(default_factory=list)

    @property
    def per_test_alpha(self) -> float:
        return self.config.per_test_alpha


def _jobs(config: AuditConfig, seed: int) -> list[Job]:
    jobs = []
    for c, setting in enumerate(config.settings.values()):
        setting = with_length(setting, config.length)
        parts = parts_of(setting)
        prompts = tuple(p for p in config.prompts for _ in parts)
        sampling = tuple(part for _ in config.prompts for part in parts)
        job = Job(prompts, sampling, config.samples, seed + c * _SEED_SPAN)
        if job.outputs > _SEED_SPAN:
            raise ValueError(f"a job of {job.outputs} outputs overflows the seed span reserved per case")
        jobs.append(job)
    return jobs


def _observed_tv(seqs: Sequence[torch.Tensor], laws: Sequence[torch.Tensor], symbols: int, length: int,
                 last: int) -> float:
    """Sample-weighted TV between the empirical and exact laws of the first ``last`` tokens."""
    total = sum(s.shape[0] for s in seqs)
    tv = 0.0
    for s, law in zip(seqs, laws):
        cells = symbols ** last
        emp = torch.bincount(window_codes(s, symbols, 1, last), minlength=cells).double() / s.shape[0]
        exact = law.view(*([symbols] * length)).sum(dim=tuple(range(last, length))).reshape(-1) if last < length \
            else law
        tv += s.shape[0] / total * 0.5 * float((emp - exact).abs().sum())
    return tv


def _outcome_name(o) -> str:
    return "refused" if isinstance(o, Refused) else "error" if isinstance(o, EngineFailed) else "ran"


def audit(engine: Engine, model, config: AuditConfig, *, tables: LogitTables | None = None,
          plain_outcomes: list | None = None, progress=None) -> AuditReport:
    """Audit ``engine`` (one method) on ``model``, the Hugging Face checkpoint it serves, under ``config``.
    ``tables``: reuse the model's LogitTables; ``plain_outcomes``: an earlier report's plain arm (same engine
    and config), so several methods share it; ``progress(message)`` between stages."""
    say = progress or (lambda msg: None)
    start = time.perf_counter()
    vocab = int(model.get_output_embeddings().weight.shape[0])
    config.check(vocab)
    prof = get_profile(engine.profile)
    plain_seed = config.seed + _SEED_SPAN * (len(config.settings) + 1) if config.plain_seed is None \
        else config.plain_seed
    spec_jobs, plain_jobs = _jobs(config, config.seed), _jobs(config, plain_seed)
    check_independent(spec_jobs, plain_jobs)
    symbols = vocab + 1
    say(f"enumerating the exact law of {len(config.prompts)} prompts x {config.length} tokens")
    if tables is None:
        tables = LogitTables(model, config.length)
    elif tables.model is not model or tables.length != config.length:
        raise ValueError("tables must be LogitTables of the audited model at config.length")
    for p in config.prompts:
        tables[p]
    laws: dict = {}

    def law_of(prompt, part: Sampling) -> torch.Tensor:
        if (prompt, part) not in laws:
            laws[(prompt, part)] = exact_law(tables[prompt], part, prof)
        return laws[(prompt, part)]

    say(f"{engine.name}/{engine.method}: {len(spec_jobs)} settings with speculation")
    spec_out = engine.run(spec_jobs, True)
    if plain_outcomes is None:
        say(f"{engine.name}/{engine.method}: {len(plain_jobs)} settings without speculation")
        plain_out = engine.run(plain_jobs, False)
    else:
        plain_out = list(plain_outcomes)
    if len(spec_out) != len(spec_jobs) or len(plain_out) != len(plain_jobs):
        raise ValueError(f"engine {engine.name} returned {len(spec_out)} / {len(plain_out)} outcomes for "
                         f"{len(spec_jobs)} jobs")
    alpha = config.per_test_alpha
    cases = []
    for c, (name, setting) in enumerate(config.settings.items()):
        job, so, po = spec_jobs[c], spec_out[c], plain_out[c]
        case = CaseResult(name, setting.describe(), Verdict("inconclusive", None, "not run"),
                          plain_outcome=_outcome_name(po))
        if isinstance(so, (Refused, EngineFailed)):
            kind = "refused" if isinstance(so, Refused) else "error"
            by = f" (by the {so.by})" if isinstance(so, Refused) and so.by != "engine" else ""
            also = "; refused without speculation too" if isinstance(po, Refused) else ""
            case.verdict = Verdict(kind, None, f"{kind}{by} with speculation{also}")
            case.message = str(so)
            cases.append(case)
            continue
        say(f"testing {name}")
        strata_laws = [law_of(p, s) for p, s in zip(job.prompts, job.sampling)]
        spec_seqs = [pad_outputs(o, config.length, vocab) for o in so.outputs]
        case.spec_tests = window_law_tests(f"{name}/speculative", list(zip(spec_seqs, strata_laws)), symbols,
                                           config.windows)
        case.requests, case.outputs = so.requests, sum(len(o) for o in so.outputs)
        case.drafted, case.accepted, case.extra = so.drafted, so.accepted, dict(so.extra)
        last = min(2, config.length)
        case.observed_tv["speculative"] = _observed_tv(spec_seqs, strata_laws, symbols, config.length, last)
        plain_ran = isinstance(po, Samples)
        if plain_ran:
            plain_seqs = [pad_outputs(o, config.length, vocab) for o in po.outputs]
            case.plain_tests = window_law_tests(f"{name}/plain", list(zip(plain_seqs, strata_laws)), symbols,
                                                config.windows)
            case.two_sample = two_sample_tests(f"{name}/two-sample", list(zip(spec_seqs, plain_seqs)), symbols,
                                               config.windows)
            case.observed_tv["plain"] = _observed_tv(plain_seqs, strata_laws, symbols, config.length, last)
        else:
            case.message = f"plain arm {_outcome_name(po)}: {po}"
        alts = [flattened(law) for law in strata_laws]
        case.power = detectable_tv(strata_laws, alts, [s.shape[0] for s in spec_seqs], symbols, config.length,
                                   config.windows, alpha, replicates=config.power_replicates, seed=c)
        case.verdict = decide(
            spec_rejected=any(t.p_value < alpha for t in case.spec_tests),
            plain_rejected=any(t.p_value < alpha for t in case.plain_tests),
            two_rejected=any(t.p_value < alpha for t in case.two_sample), plain_ran=plain_ran,
            accepted_per_request=case.accepted_per_request, min_accepted=config.min_accepted,
            min_tv=case.power.min_tv, max_tv=config.max_tv)
        cases.append(case)
    return AuditReport(engine.describe(), config, cases, time.perf_counter() - start, dict(laws),
                       plain_outcomes=plain_out)
