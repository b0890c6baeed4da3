"""``specdec plan --engine vllm``: measure each candidate on each pool, derive the batch-size
schedules, predict goodput against load, and decide per pool (inputs checked before any server).

Steps: one server per static candidate: each pool measured (:mod:`.measure`), then ``bursts`` full
batches (:func:`~.measure.measure_burst`: steps past the pool's arrivals for :mod:`.calibrate`, and
their spread, :mod:`.burst_noise`); a refused or dead server is recorded with its reason and left
out (off must measure); greedy outputs compared with off's. Per pool the best served family's
schedule and the cost-gated drafter's table (:mod:`.schedule`), each measured the same way on its
own server (the K = 0 tax read from its steps and off's). Then off's bursts again (:mod:`.drift`),
prediction (:mod:`.predict`), memory (:mod:`.kv_budget`) and the decision (:mod:`.decide`).
:mod:`.recorded` serves a recorded plan's runs in place of servers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path
from typing import Callable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from ..goodput import SLO
from .burst_noise import BurstNoise, burst_noise, full_rows
from .calibrate import DEFAULT_GAP, Calibration, calibrate, with_bursts
from .candidates import SCHEDULABLE, Candidate
from .decide import Decision, Thresholds, assess, decide, preference
from .drift import NOT_MEASURED, Drift, drift
from .launcher import ServeCommand, Server, ServerDied, ServerRefused
from .measure import MeasurementError, PoolRun, measure_burst, measure_pool
from .kv_budget import admitted, predict_blocks, read_config, weight_bytes
from .pool_spec import VllmPool
from .engine_trace import Engine
from .predict import StepModels, predict, rates_for
from .schedule import Gain, derive, family_basis, measured_scale, no_draft_tax, pays_up_to, schedule_candidate


SIMULATION = ("levels", "sim_requests", "replications", "seed", "gap", "schedules")  # PlanSettings' a plan records


@dataclasses.dataclass
class PlanSettings:
    """How the plan measures and simulates (defaults sized for a few minutes per server on a CPU)."""

    candidates: Sequence[Candidate]
    engine: Engine
    thresholds: Thresholds = dataclasses.field(default_factory=Thresholds)
    levels: int = 6
    sim_requests: int = 200
    replications: int = 3
    seed: int = 0
    gap: float = DEFAULT_GAP
    start_timeout: float = 900.0
    request_timeout: float = 300.0
    schedules: bool = True
    bursts: int = 2  # full batches sent after each measurement (2+: the overload's noise is measured)
    drift_check: bool = True  # off's bursts again after the last candidate (.drift)
    target: str | None = None  # the served model's folder (fingerprints, memory prediction)
    dtype: str | None = None

    def __post_init__(self):
        if not any(c.method == "off" for c in self.candidates):
            raise ValueError("the candidates must include off: every decision is relative to it")
        for name, v in (("levels", self.levels - 1), ("sim_requests", self.sim_requests),
                        ("replications", self.replications), ("bursts", self.bursts)):
            if v < 1:
                raise ValueError(f"{name} is too small: {getattr(self, name)}")


class Source(Protocol):
    """Where each candidate's runs come from: :class:`ServerSource` (servers) or
    :class:`~.recorded.RecordedSource` (a recorded plan)."""

    def cannot_serve(self, candidate: Candidate, pool: str) -> str | None:
        """Why a derived schedule will not be measured (None: it will)."""

    def measure(self, cand: Candidate, pools: Sequence[VllmPool], settings: PlanSettings, out: Path,
                log: Callable[[str], None], tag: str = "") -> tuple[dict[str, PoolRun], dict[str, list[PoolRun]]]:
        """``cand``'s run and bursts on each pool (each kept under ``out/runs/``); ServerRefused,
        ServerDied, MeasurementError or TimeoutError when it cannot be had."""

    def measure_again(self, cand: Candidate, pools: Sequence[VllmPool], settings: PlanSettings, out: Path,
                      log: Callable[[str], None]) -> dict[str, list[PoolRun]]:
        """``cand``'s bursts alone on each pool, once more (the drift check, kept as :func:`drift_kind`
        runs); empty lists where there are none (a record from before the check)."""


class ServerSource:
    """Where each candidate's server comes from: launched from the user's command, or at a given URL."""

    def __init__(self, log_dir: Path, *, command: ServeCommand | None = None, urls: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None, start_timeout: float = 900.0):
        if (command is None) == (urls is None):
            raise ValueError("give either a serve command or the running servers' URLs")
        self.log_dir, self.command, self.urls = Path(log_dir), command, dict(urls or {})
        self.env, self.start_timeout = dict(env or {}), start_timeout

    def cannot_serve(self, candidate: Candidate, pool: str) -> str | None:
        """Why a derived schedule will not be measured here (None: it will)."""
        if self.command is not None or candidate.name in self.urls:
            return None
        return "derived but not measured: no server for it (--server gives URLs only)"

    def measure(self, cand: Candidate, pools: Sequence[VllmPool], settings: PlanSettings, out: Path,
                log: Callable[[str], None], tag: str = "") -> tuple[dict[str, PoolRun], dict[str, list[PoolRun]]]:
        """Each pool's run on ``cand``'s server, and after it ``settings.bursts`` bursts of
        ``max_num_seqs`` requests each, every one written under ``out/runs/`` as it finishes."""
        runs: dict[str, PoolRun] = {}
        bursts: dict[str, list[PoolRun]] = {}
        with self.server(cand, tag) as server:
            for pool in pools:
                log(f"  {cand.name}: pool {pool.name} ({len(pool.prompts)} requests, {pool.rates[0]:g} to "
                    f"{pool.rates[1]:g} req/s)")
                runs[pool.name] = measure_pool(server, cand.name, pool, seed=settings.seed,
                                               timeout=settings.request_timeout, expect_k=cand.k)
                keep_run(out, cand, pool.name, runs[pool.name])
                bursts[pool.name] = self._bursts(server, cand, pool, settings, out, log, burst_kind)
        return runs, bursts

    def measure_again(self, cand: Candidate, pools: Sequence[VllmPool], settings: PlanSettings, out: Path,
                      log: Callable[[str], None]) -> dict[str, list[PoolRun]]:
        """``settings.bursts`` bursts on each pool on ``cand``'s server once more (the drift check; a
        fresh server when launched here, the same one at a given URL)."""
        with self.server(cand, "again") as server:
            return {pool.name: self._bursts(server, cand, pool, settings, out, log, drift_kind) for pool in pools}

    @staticmethod
    def _bursts(server: Server, cand: Candidate, pool: VllmPool, settings: PlanSettings, out: Path,
                log: Callable[[str], None], kind: Callable[[int], str]) -> list[PoolRun]:
        """``settings.bursts`` bursts of ``max_num_seqs`` requests, each kept as ``kind(i)`` as it finishes."""
        burst = settings.engine.max_num_seqs
        runs = []
        for i in range(settings.bursts):
            log(f"  {cand.name}: pool {pool.name}, {kind(0).strip('_')} {i + 1} of {settings.bursts}: {burst} "
                "requests at once")
            runs.append(measure_burst(server, cand.name, pool, burst, timeout=settings.request_timeout))
            keep_run(out, cand, pool.name, runs[-1], kind(i))
        return runs

    @contextlib.contextmanager
    def server(self, candidate: Candidate, tag: str = "") -> Iterator[Server]:
        """A ready server running ``candidate`` (stopped on exit when launched here); ServerRefused when vLLM
        refused it or no URL was given for it."""
        if self.command is None:
            if candidate.name not in self.urls:
                raise ServerRefused(candidate.name, "no running server was given for it (--server NAME=URL)")
            server = Server(candidate.name, self.urls[candidate.name])
            server.wait_ready(self.start_timeout)
            yield server
            return
        safe = candidate.name.replace(":", "-") + (f"-{tag}" if tag else "")
        server = Server.launch(candidate.name, self.command, candidate.config, self.log_dir / f"server-{safe}.log",
                               env=self.env)
        try:
            server.wait_ready(self.start_timeout)
            yield server
        finally:
            server.stop()


@dataclasses.dataclass
class PoolOutcome:
    """Everything one pool's decision was made from (what the report shows)."""

    pool: VllmPool
    rates: list[float]
    candidates: dict[str, Candidate]
    cals: dict[str, Calibration]
    runs: dict[str, PoolRun]
    predictions: dict[str, list[dict]]
    exact: dict[str, bool | None]
    gains: dict[str, list[Gain]]
    memory: dict[str, dict]
    noise: BurstNoise  # what a loss at an overload must exceed to count
    decision: Decision | None  # None until decided, after the drift check (plan_vllm)
    skipped: dict[str, str]
    models: dict[str, StepModels]  # what each prediction was made with
    bound: dict[str, int]  # per candidate: the most running requests it drafts at (.decide)
    drift: Drift = NOT_MEASURED  # whether the machine kept its speed while the plan measured

    @property
    def overload_floor(self) -> float:
        """The loss at an overload that counts (:meth:`~.drift.Drift.floor`)."""
        return self.drift.floor(self.noise)


@dataclasses.dataclass
class PlanResult:
    pools: dict[str, PoolOutcome]
    refused: dict[str, str]
    failed: dict[str, str]
    vllm_version: str
    settings: PlanSettings


def _exact(run: PoolRun, off: PoolRun, pool: VllmPool) -> bool | None:
    """Greedy pools: whether every output equals off's; sampled pools: None (not comparable)."""
    if not pool.sampling.greedy:
        return None
    return all(a.token_ids == b.token_ids for a, b in zip(run.streams, off.streams))


def run_file(plan_dir: Path, candidate: str, pool: str, kind: str = "") -> Path:
    """Where a plan keeps ``candidate``'s run on ``pool``: ``runs/<candidate>__<pool><kind>.json``
    (``:`` written ``-``; ``kind``: ``""`` or a :func:`burst_kind`)."""
    return Path(plan_dir) / "runs" / f"{candidate.replace(':', '-')}__{pool}{kind}.json"


def burst_kind(i: int) -> str:
    """The :func:`run_file` kind of the ``i``-th burst (from 0): ``__burst``, ``__burst2``, ..."""
    return "__burst" if i == 0 else f"__burst{i + 1}"


def drift_kind(i: int) -> str:
    """The :func:`run_file` kind of the drift check's ``i``-th burst: ``__drift``, ``__drift2``, ..."""
    return "__drift" if i == 0 else f"__drift{i + 1}"


def burst_files(plan_dir: Path, candidate: str, pool: str, kind: Callable[[int], str] = burst_kind) -> list[Path]:
    """The bursts (``kind``: :func:`burst_kind` or :func:`drift_kind`) a plan in ``plan_dir`` kept of
    ``candidate`` on ``pool``, in the order they ran."""
    out = []
    while (path := run_file(plan_dir, candidate, pool, kind(len(out)))).is_file():
        out.append(path)
    return out


def keep_run(out: Path, cand: Candidate, pool: str, run: PoolRun, kind: str = "") -> None:
    """``run`` written to its :func:`run_file` under ``out``."""
    path = run_file(out, cand.name, pool, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run.to_dict()))


def _memory(cal_off: Calibration, runs: Mapping[str, PoolRun], cands: Mapping[str, Candidate],
            settings: PlanSettings) -> dict[str, dict]:
    """Per candidate: KV blocks measured and predicted, requests admitted, and those given up to the drafter."""
    tokens = float(np.mean([i.prompt_len + i.output_len for i in cal_off.items]))
    target_cfg = read_config(settings.target) if settings.target else None
    off_cache = runs["off"].cache
    cap = settings.engine.max_num_seqs
    base = admitted(off_cache, tokens)
    out = {}
    for name, run in runs.items():
        c = cands[name]
        look = c.k + (1 if c.method == "draft_model" else 0)
        predicted = None
        if target_cfg is not None:
            if c.artifact is None and c.method != "mtp":
                predicted = off_cache.num_blocks
            elif c.artifact is not None and read_config(c.artifact) is not None:
                predicted = predict_blocks(off_cache, target_cfg, read_config(c.artifact), weight_bytes(c.artifact),
                                           dtype=settings.dtype)
        n = admitted(run.cache, tokens, look)
        out[name] = {"blocks": run.cache.num_blocks, "blocks_predicted": predicted, "block_size": run.cache.block_size,
                     "admitted": n, "admitted_off": base, "given_up": base - n,
                     "effective": min(n, cap), "effective_given_up": min(base, cap) - min(n, cap),
                     "tokens_per_request": tokens}
    return out


def table_basis(candidate: Candidate, basis: Calibration, measured: Calibration, off: Calibration
                ) -> tuple[Calibration, float, tuple[float, list[int]] | None]:
    """What :func:`model_of` predicts a measured table from: its family's ``basis``
    (:func:`~.schedule.family_basis`), the scale of its own drafting steps
    (:func:`~.schedule.measured_scale`) and its K = 0 tax against ``off``
    (:func:`~.schedule.no_draft_tax`)."""
    return (basis, measured_scale(basis, measured, candidate),
            no_draft_tax(off.per_batch, measured.per_batch, candidate))


def model_of(name: str, cals: Mapping[str, Calibration],
             schedule_basis: Mapping[str, tuple[Calibration, float, tuple[float, list[int]] | None]]) -> StepModels:
    """What a candidate is predicted with: its own calibration, or for a schedule ``(basis, scale,
    tax)`` its family's (:func:`~.schedule.family_basis`) scaled to the schedule's own drafting steps,
    and its steps without drafts at off's cost times the measured tax (:func:`~.schedule.no_draft_tax`,
    recorded in the model's ``meta``; None: the family's fit)."""
    if name in schedule_basis:
        basis, scale, tax = schedule_basis[name]
        no_draft = None
        if tax is not None:
            off = cals["off"].cost.scaled(tax[0])
            no_draft = dataclasses.replace(off, meta={**off.meta, "no_draft_tax_at": tax[1]})
        return StepModels(basis.cost.scaled(scale), basis.acceptance, no_draft)
    return StepModels(cals[name].cost, cals[name].acceptance)


def _predict_all(pool: VllmPool, cands: Mapping[str, Candidate], cals: Mapping[str, Calibration],
                 runs: Mapping[str, PoolRun], rates: list[float], settings: PlanSettings,
                 models: Mapping[str, StepModels], drift: Drift | None) -> dict[str, list[dict]]:
    """Every candidate on the pool's requests as off served them (one workload for all), at ``rates``;
    the band is the cost fit's widened by ``drift`` (None: no band, the scores alone, a third of the
    simulation: what ranks the schedules before the drift check)."""
    slo = SLO(pool.ttft_s, pool.tpot_s)
    kw = dict(n_requests=settings.sim_requests, replications=settings.replications, seed=settings.seed)
    return {name: predict(cand, models[name].cost, models[name].acceptance, cals["off"].items,
                          runs[name].cache.tokens, settings.engine, rates, slo, pool.objective,
                          band=0.0 if drift is None else drift.band(models[name].cost.error_band()),
                          no_draft=models[name].no_draft, **kw)
            for name, cand in cands.items()}


def plan_vllm(pools: Mapping[str, VllmPool], settings: PlanSettings, source: Source,
              out: str | Path, log: Callable[[str], None] = print) -> PlanResult:
    """Run the plan (module docstring), writing each run under ``out/runs/`` as it finishes; RuntimeError
    when off could not be measured."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, PoolRun]] = {}
    bursts: dict[str, dict[str, list[PoolRun]]] = {}
    refused, failed = {}, {}
    for cand in settings.candidates:
        log(f"candidate {cand.name}: {json.dumps(cand.config)}")
        try:
            runs[cand.name], bursts[cand.name] = source.measure(cand, list(pools.values()), settings, out, log)
        except ServerRefused as exc:
            refused[cand.name] = exc.reason
            log(f"  {cand.name} refused: {exc.reason}")
        except (ServerDied, MeasurementError, TimeoutError) as exc:
            failed[cand.name] = str(exc)
            log(f"  {cand.name} failed: {exc}")
        if cand.method == "off" and cand.name not in runs:
            raise RuntimeError(f"off could not be measured, so nothing can be decided: "
                               f"{refused.get(cand.name) or failed.get(cand.name)}")
    version = next((r.vllm_version for by_pool in runs.values() for r in by_pool.values() if r.vllm_version), "")
    measured = {pool.name: _measure_pool(pool, runs, bursts, settings, source, out, log, failed)
                for pool in pools.values()}
    again = _measure_again(pools, settings, source, out, log, failed)
    outcomes = {}
    for name, o in measured.items():
        o.drift = drift(bursts["off"][name], again.get(name, []), o.cals["off"],
                        full_rows(settings.engine.max_num_seqs), o.noise, settings.gap, settings.engine)
        outcomes[name] = _decide_pool(o, settings, log)
    return PlanResult(outcomes, refused, failed, version, settings)


def _measure_again(pools: Mapping[str, VllmPool], settings: PlanSettings, source: Source, out: Path,
                   log: Callable[[str], None], failed: dict[str, str]) -> dict[str, list[PoolRun]]:
    """Off's drift-check bursts per pool (:mod:`.drift`); none when the check is off or cannot run
    (then ``failed["off, again"]`` says why, and the plan decides without it)."""
    if not settings.drift_check:
        return {}
    off = next(c for c in settings.candidates if c.method == "off")
    log("off again, its bursts only: did the machine keep its speed?")
    try:
        return source.measure_again(off, list(pools.values()), settings, out, log)
    except (ServerRefused, ServerDied, MeasurementError, TimeoutError) as exc:
        failed["off, again"] = f"the drift check: {exc}"
        log(f"  the drift check failed, so drift is not measured: {exc}")
        return {}


def _decide_pool(o: PoolOutcome, settings: PlanSettings, log: Callable[[str], None]) -> PoolOutcome:
    """``o``'s predictions with their bands (widened by ``o.drift``) and its decision."""
    d = o.drift
    if d.shift is not None:
        log(f"pool {o.pool.name}: off's full-batch step at the end of the plan took {d.factor:.3f}x its time at "
            f"the start ({'beyond' if d.told else 'within'} the bursts' noise)")
    o.predictions = _predict_all(o.pool, o.candidates, o.cals, o.runs, o.rates, settings, o.models, d)
    o.decision = decide(o.pool.name, o.pool.objective, o.candidates, o.predictions, o.cals,
                        {k: v is not False for k, v in o.exact.items()}, o.bound, settings.thresholds,
                        settings.engine.max_num_seqs, overload_floor=o.overload_floor)
    log(f"pool {o.pool.name}: {o.decision.sentence}")
    return o


def _measure_pool(pool: VllmPool, all_runs: Mapping[str, Mapping[str, PoolRun]],
               all_bursts: Mapping[str, Mapping[str, Sequence[PoolRun]]], settings: PlanSettings,
               source: Source,
               out: Path, log: Callable[[str], None], failed: dict[str, str]) -> PoolOutcome:
    t = settings.thresholds
    cands = {c.name: c for c in settings.candidates if c.name in all_runs}
    runs = {name: all_runs[name][pool.name] for name in cands}
    skipped: dict[str, str] = {}
    cals: dict[str, Calibration] = {}
    for name in list(cands):
        try:
            cals[name] = with_bursts(calibrate(runs[name], gap=settings.gap, engine=settings.engine),
                                     all_bursts[name][pool.name], gap=settings.gap, engine=settings.engine)
        except (MeasurementError, ValueError) as exc:
            if name == "off":
                raise RuntimeError(f"pool {pool.name!r}: off's measurement cannot be used: {exc}") from None
            skipped[name] = str(exc)
            del cands[name], runs[name]
    exact = {name: _exact(runs[name], runs["off"], pool) for name in cands}
    noise = burst_noise({name: all_bursts[name][pool.name] for name in cands}, cals,
                        full_rows(settings.engine.max_num_seqs), settings.gap, settings.engine)
    if noise.dof:
        log(f"pool {pool.name}: one burst's full-batch steps vary by {noise.sigma:.1%} ({noise.dof} degrees of "
            f"freedom); a loss at an overload counts beyond {max(t.max_loss, noise.floor):.1%}")
    rates = rates_for(*pool.rates, settings.levels)
    models = {name: model_of(name, cals, {}) for name in cands}
    predictions = _predict_all(pool, cands, cals, runs, rates, settings, models, None)
    gains: dict[str, list[Gain]] = {}
    bound: dict[str, int] = {}
    for name, c in cands.items():
        if c.method != "off":
            _, table = derive(cals["off"], {c.k: c}, {c.k: cals[name]}, settings.engine.max_num_seqs,
                              margin=t.margin)
            bound[name] = pays_up_to(table, c.k, t.margin)
    schedule_basis: dict[str, tuple[Calibration, float, tuple[float, list[int]] | None]] = {}
    # The best family's schedule first; when vLLM refuses it or dies serving it (0.32's suffix drafter
    # asserts a fixed K), the next family's, so a pool keeps a measured schedule wherever one runs.
    # The cost gate's table is measured beside it: specdec's drafter applies it on any vLLM build.
    measured_one = False
    for cand, basis in (_schedules(pool, cands, cals, predictions, exact, settings, gains, noise.floor)
                        if settings.schedules else []):
        if measured_one and cand.method != "custom_class":
            continue
        why = source.cannot_serve(cand, pool.name)
        if why is not None:
            skipped[cand.name] = why
            continue
        log(f"candidate {cand.name} for pool {pool.name}: {json.dumps(cand.config)}")
        try:
            by_pool, bursts = source.measure(cand, [pool], settings, out, log, tag=pool.name)
            run = by_pool[pool.name]
        except ServerRefused as exc:
            skipped[cand.name] = f"vLLM refused to start: {exc.reason}"
            continue
        except (ServerDied, MeasurementError, TimeoutError) as exc:
            skipped[cand.name] = str(exc)
            failed[cand.name] = str(exc)
            continue
        cal = with_bursts(calibrate(run, gap=settings.gap, engine=settings.engine), bursts[pool.name], gap=settings.gap,
                          fit=False, engine=settings.engine)
        cands[cand.name], runs[cand.name], cals[cand.name] = cand, run, cal
        exact[cand.name] = _exact(run, runs["off"], pool)
        schedule_basis[cand.name] = table_basis(cand, basis, cal, cals["off"])
        models[cand.name] = model_of(cand.name, cals, schedule_basis)
        bound[cand.name] = max((e[1] for e in cand.schedule if e[2] > 0), default=0)
        predictions.update(_predict_all(pool, {cand.name: cand}, cals, runs, rates, settings, models, None))
        measured_one = True
        if cand.method == "custom_class":
            break
    return PoolOutcome(pool, rates, cands, cals, runs, predictions, exact, gains,
                       _memory(cals["off"], runs, cands, settings), noise, None, skipped, models, bound)


def _schedules(pool: VllmPool, cands: Mapping[str, Candidate], cals: Mapping[str, Calibration],
               predictions: Mapping[str, list[dict]], exact: Mapping[str, bool | None], settings: PlanSettings,
               gains: dict[str, list[Gain]], overload_floor: float) -> list[tuple[Candidate, Calibration]]:
    """One schedule per method family, best family first (ranked by its best exact static candidate),
    each with the basis it is predicted from (:func:`~.schedule.family_basis`); families whose
    schedule would add nothing (every batch size at one K) are left out. ``gains`` receives each
    family's per-batch-size gain table; ``overload_floor``: :func:`~.decide.assess`'s."""
    t = settings.thresholds
    off = predictions["off"]
    best_at = [max(rows[i]["score"] for rows in predictions.values()) for i in range(len(off))]
    static = [n for n, c in cands.items() if c.method in SCHEDULABLE and c.schedule is None and exact[n] is not False]
    ranked = sorted((assess(n, predictions[n], off, best_at, t, pool.objective, True, overload_floor)
                     for n in static),
                    key=lambda a: preference(a, cands[a.name], pool.objective, t), reverse=True)
    out = []
    for family_name in dict.fromkeys(cands[a.name].family for a in ranked):
        family = {c.k: c for c in cands.values() if c.family == family_name and c.schedule is None}
        schedule, table = derive(cals["off"], family, {k: cals[c.name] for k, c in family.items()},
                                 settings.engine.max_num_seqs, margin=t.margin)
        gains[family_name] = table
        if schedule is not None:
            basis = family_basis({k: cals[c.name] for k, c in family.items()})
            out.append((schedule_candidate(family, schedule), basis))
    return out
