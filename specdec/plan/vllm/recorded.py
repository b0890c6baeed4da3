"""A recorded vLLM plan made again by today's code from the runs it measured, with no server
(``specdec plan --engine vllm --replay PLAN_DIR --out NEW``): what a change to the step-cost fit, the
simulator or the decision does to a past plan's answer, judged on the steps that plan measured.

The record (``plan.json``, ``review.json``, ``runs/``) gives the pools (their prompt files read again
and checked unchanged), the engine, the thresholds, the static candidates and the simulation
settings; a plan written before it recorded them (before 0.3.0's release) is simulated with
:class:`~.run_plan.PlanSettings`' defaults, which :attr:`Replay.notes` says. Today's code derives the
schedules again; one whose table differs from the table the record measured cannot be replayed (its
steps were never measured) and is left out with that reason, never simulated from another's steps.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .candidates import Candidate
from .decide import Thresholds
from .launcher import ServeCommand, ServerRefused
from .measure import PoolRun
from .pool_spec import VllmPool, pool_from_description
from .engine_trace import Engine
from .recheck import candidate_of
from .run_plan import (SIMULATION, PlanResult, PlanSettings, burst_files, burst_kind, drift_kind, keep_run, plan_vllm,
                       run_file)

OVERRIDABLE = ("levels", "sim_requests", "replications", "seed")  # what a replay may simulate otherwise than the record


class RecordedSource:
    """A recorded plan's runs served in place of servers. A candidate is served only as the record
    served it on that pool: a derived schedule whose table differs is left out with that reason."""

    def __init__(self, plan_dir: str | Path):
        self.plan_dir = Path(plan_dir)
        try:
            record = json.loads((self.plan_dir / "plan.json").read_text())
            self.configs = {(pool, name): config for pool, o in record["pools"].items()
                            for name, config in o["candidates"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{self.plan_dir}: not a folder that specdec plan --engine vllm wrote ({exc})") from None

    def cannot_serve(self, candidate: Candidate, pool: str) -> str | None:
        if (pool, candidate.name) not in self.configs or not run_file(self.plan_dir, candidate.name, pool).is_file():
            return "derived but not measured: the recorded plan has no run of it"
        recorded = self.configs[(pool, candidate.name)]
        if recorded != candidate.config:
            return (f"derived but not measured: the recorded plan served {json.dumps(recorded)}, not "
                    f"{json.dumps(candidate.config)}")
        return None

    def measure(self, cand: Candidate, pools: Sequence[VllmPool], settings: PlanSettings, out: Path,
                log: Callable[[str], None], tag: str = "") -> tuple[dict[str, PoolRun], dict[str, list[PoolRun]]]:
        """The recorded run and bursts of ``cand`` on each pool (copied under ``out/runs/``; no bursts
        for a plan recorded without them); ServerRefused naming what the record lacks for a candidate
        it did not serve so."""
        runs: dict[str, PoolRun] = {}
        bursts: dict[str, list[PoolRun]] = {}
        for pool in pools:
            why = self.cannot_serve(cand, pool.name)
            if why is not None:
                raise ServerRefused(cand.name, why.replace("derived but not measured: ", "replaying: "))
            runs[pool.name] = PoolRun.from_dict(json.loads(run_file(self.plan_dir, cand.name, pool.name).read_text()))
            keep_run(out, cand, pool.name, runs[pool.name])
            bursts[pool.name] = self._bursts(cand, pool.name, out, burst_kind)
            log(f"  {cand.name}: pool {pool.name}, the recorded run and {len(bursts[pool.name])} burst(s)")
        return runs, bursts

    def measure_again(self, cand: Candidate, pools: Sequence[VllmPool], settings: PlanSettings, out: Path,
                      log: Callable[[str], None]) -> dict[str, list[PoolRun]]:
        """The recorded drift check's bursts (none for a plan recorded before it or without it)."""
        return {pool.name: self._bursts(cand, pool.name, out, drift_kind) for pool in pools}

    def _bursts(self, cand: Candidate, pool: str, out: Path, kind: Callable[[int], str]) -> list[PoolRun]:
        """The recorded bursts of ``kind`` of ``cand`` on ``pool``, each copied under ``out/runs/``."""
        bursts = [PoolRun.from_dict(json.loads(path.read_text()))
                  for path in burst_files(self.plan_dir, cand.name, pool, kind)]
        for i, burst in enumerate(bursts):
            keep_run(out, cand, pool, burst, kind(i))
        return bursts


@dataclasses.dataclass
class Replay:
    """What a recorded plan is made again from."""

    pools: dict[str, VllmPool]
    settings: PlanSettings
    decisions: dict[str, str]  # pool -> the recorded decision's sentence
    serve: str | None  # the recorded serve command (the new review record keeps it)
    servers: dict[str, str] | None
    notes: list[str]  # what the replay could not take from the record


def load_replay(plan_dir: str | Path, overrides: Mapping[str, int] | None = None) -> Replay:
    """The pools, settings and decisions of the plan in ``plan_dir``; ``overrides``: any of
    :data:`OVERRIDABLE`. ValueError naming a folder that is not a plan, an override that is not one,
    or a pool whose prompt file is gone or changed."""
    plan_dir = Path(plan_dir)
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise ValueError(f"a replay simulates otherwise than its record only in {', '.join(OVERRIDABLE)}; "
                         f"got {', '.join(unknown)}")
    try:
        plan = json.loads((plan_dir / "plan.json").read_text())
        review = json.loads((plan_dir / "review.json").read_text())
        pools = {name: pool_from_description(o["pool"]) for name, o in plan["pools"].items()}
        static: dict[str, Candidate] = {}
        for o in plan["pools"].values():
            for name, config in o["candidates"].items():
                cand = candidate_of(config, name)
                if cand.schedule is None:
                    static.setdefault(name, cand)
        decisions = {name: o["decision"] for name, o in plan["pools"].items()}
        engine, thresholds = Engine(**plan["engine"]), Thresholds(**plan["thresholds"])
        target, serve, servers = review["target"]["model"], review.get("serve"), review.get("servers")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{plan_dir}: not a folder that specdec plan --engine vllm wrote ({exc})") from None
    recorded = plan.get("simulation")
    notes = []
    if recorded is None:
        recorded = {"levels": max(len(o["rates"]) for o in plan["pools"].values())}
        notes.append("the record holds no simulation settings (written before they were recorded): simulated "
                     "with the defaults, " + ", ".join(f"{k} {getattr(PlanSettings, k)}" for k in SIMULATION
                                                        if k != "levels"))
    sim = {k: v for k, v in recorded.items() if k in SIMULATION}
    sim.update(overrides)
    notes += [f"{k} {v} (recorded: {recorded.get(k, 'not recorded')})" for k, v in overrides.items()
              if recorded.get(k) != v]
    dtype = ServeCommand(serve).option("--dtype") if serve else None
    settings = PlanSettings(list(static.values()), engine, thresholds, target=target, dtype=dtype, **sim)
    return Replay(pools, settings, decisions, serve, servers, notes)


def replay(plan_dir: str | Path, out: str | Path, overrides: Mapping[str, int] | None = None,
           log: Callable[[str], None] = print) -> tuple[Replay, PlanResult]:
    """The plan in ``plan_dir`` made again into ``out`` (module docstring); ValueError as
    :func:`load_replay`'s, or for ``out`` being the recorded plan's own folder."""
    if Path(out).resolve() == Path(plan_dir).resolve():
        raise ValueError(f"{out}: the replay would overwrite the recorded plan; write it elsewhere")
    rec = load_replay(plan_dir, overrides)
    return rec, plan_vllm(rec.pools, rec.settings, RecordedSource(plan_dir), out, log=log)
