"""``specdec review --engine vllm``: is each pool's speculative_config still right? keep / re-plan / turn off.

First the record's fingerprints are compared with the files: a pool whose draft model or heads are
bound to a checkpoint (or tokenizer) that changed is turned off at once, unmeasured. Then a short
sample of each remaining speculating pool is measured on off and on its configuration with the
plan's thresholds (and the loss at an overload its bursts could tell from noise, as recorded).
*Turn off* when it no longer meets them or its greedy outputs differ; *re-plan* when it still pays
but what the plan rested on moved beyond the recorded tolerance; *keep* otherwise. A pool planned
off is re-planned when its target, vLLM or mix moved.

Off is measured on every pool the review does not turn off or already re-plan, planned off
included, because its decode steps say how fast the engine runs: where the hardware, the serve
command or vLLM made a step slower or faster than when planned (by more than the ``speed``
threshold, at the batch sizes both measured), the knee and the price of a drafted token moved with
it, so the pool is re-planned whatever else held. (A pool planned off on a CPU may well pay on a
GPU, and the reverse.)
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Callable, Mapping

from ..goodput import SLO
from .calibrate import DEFAULT_GAP, Calibration, calibrate
from ...control.batch_schedule import validate_schedule
from .candidates import Candidate
from .decide import Thresholds, assess
from .launcher import ServerDied, ServerRefused
from .measure import MeasurementError, PoolRun, measure_burst, measure_pool
from .run_plan import ServerSource
from .pool_spec import VllmPool
from .engine_trace import Engine
from .predict import predict_calibrated, rates_for
from .record import model_fingerprint, tokenizer_fingerprint


@dataclasses.dataclass
class PoolVerdict:
    pool: str
    verdict: str  # "keep" | "re-plan" | "turn off"
    config: dict | None
    reasons: list[str]
    measured: dict = dataclasses.field(default_factory=dict)


def candidate_of(config: dict | None, name: str) -> Candidate:
    """The candidate a recorded ``speculative_config`` is (refusing one this package did not write)."""
    if config is None:
        return Candidate("off", "off")
    try:
        schedule = config.get("num_speculative_tokens_per_batch_size")
        k = int(config["num_speculative_tokens"])
        cand = Candidate(name, config["method"], k, config.get("model") if config["method"] not in
                         ("custom_class", "ngram", "suffix") else None,
                         None if schedule is None else validate_schedule(schedule, k))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the record's speculative_config {config!r} is not one a plan writes: {exc}") from None
    if cand.config != config:
        raise ValueError(f"the record's speculative_config {config!r} is not one a plan writes (it would serve "
                         f"{cand.config!r})")
    return cand


def mix_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Total variation distance between two category mixes (0: the same, 1: disjoint)."""
    return 0.5 * sum(abs(a.get(c, 0.0) - b.get(c, 0.0)) for c in set(a) | set(b))


def speed_ratio(planned: Mapping[str, float] | None, now: Mapping[int, float]) -> tuple[float, int] | None:
    """``(median over the batch sizes both measured of now / planned decode-step seconds, how many
    sizes)``; None when the record holds no step times or no batch size was seen in both."""
    shared = [now[int(rows)] / s for rows, s in (planned or {}).items() if int(rows) in now and s > 0]
    return (statistics.median(shared), len(shared)) if shared else None


def engine_speed(record: dict, cal_offs: Mapping[str, Calibration], speed: float) -> tuple[dict[str, str], list[str]]:
    """``({pool: why}, notes)``: why, for each pool whose off decode steps, measured now (``cal_offs``),
    run more than ``speed`` slower or faster than the record's; a note for each pool whose recorded
    batch sizes were not seen again."""
    out, notes = {}, []
    for name, cal in cal_offs.items():
        planned = record["pools"][name].get("off_steps")
        got = speed_ratio(planned, cal.step_seconds())
        if planned and got is None:
            notes.append(f"pool {name}: no batch size of off's planned steps was seen again, so the engine's speed "
                         "could not be compared")
        elif got is not None and not 1 / (1 + speed) <= got[0] <= 1 + speed:
            out[name] = (f"off's decode step now takes {got[0]:.2f}x its planned time (median over {got[1]} batch "
                         f"sizes, tolerance {speed:.0%}): the hardware, the serve command or vLLM changed the "
                         "engine's speed, and with it where drafting pays")
    return out, notes


def preflight(record: dict, target: str | None) -> tuple[list[str], dict[str, str], list[str]]:
    """``(what moved, {pool: why it must be turned off}, notes)`` from fingerprints alone; a note says
    what could not be checked (a target that is not a local folder, now and at the plan)."""
    old = record["target"]
    fp, tok = model_fingerprint(target), tokenizer_fingerprint(target)
    findings, notes = [], []
    target_moved = old.get("fingerprint") is not None and fp != old["fingerprint"]
    tok_moved = old.get("tokenizer") is not None and tok != old["tokenizer"]
    if fp is None and old.get("fingerprint") is None:
        notes.append(f"the target {target!r} is not a local folder (nor was it at the plan): whether it changed "
                     "cannot be checked")
    elif fp is None:
        findings.append(f"the target {target!r} is not a local folder, so it cannot be compared with the planned "
                        f"one ({old['fingerprint']})")
    elif target_moved:
        findings.append(f"the target changed: {old['fingerprint']} -> {fp}")
    if tok_moved:
        findings.append(f"the tokenizer changed: {old['tokenizer']} -> {tok}")
    stale = {}
    for name, p in record["pools"].items():
        if p["artifact"] is None:
            continue
        now = model_fingerprint(p["artifact"])
        if now is None:
            stale[name] = f"its draft artifact {p['artifact']} is gone"
        elif now != p["artifact_fingerprint"]:
            findings.append(f"pool {name}: the draft artifact {p['artifact']} changed: "
                            f"{p['artifact_fingerprint']} -> {now}")
        elif p["bound_to"] == "target" and target_moved:
            stale[name] = (f"its head {p['artifact']} was trained for target {old['fingerprint']}, and the target is "
                           f"now {fp}: retrain the head on the new checkpoint, then re-plan")
        elif p["bound_to"] == "tokenizer" and tok_moved:
            stale[name] = (f"its draft model {p['artifact']} shares the old tokenizer {old['tokenizer']}, and the "
                           f"target's is now {tok}: replace the draft model, then re-plan")
    return findings, stale, notes


def _measure(source: ServerSource, cand: Candidate, pools: list[VllmPool], requests: int, seed: int,
             timeout: float, burst: int = 0) -> dict[str, PoolRun]:
    """Each pool's sample; ``burst`` > 0: then that many requests at once, which the server must
    survive (a schedule's every range, as the plan checked it: :func:`~.measure.measure_burst`)."""
    runs = {}
    with source.server(cand, "review") as server:
        for pool in pools:
            runs[pool.name] = measure_pool(server, cand.name, pool, seed=seed, timeout=timeout,
                                           records=pool.prompts[:requests], expect_k=cand.k)
            if burst:
                measure_burst(server, cand.name, pool, burst, timeout=timeout)
    return runs


def review_vllm(record: dict, pools: Mapping[str, VllmPool], source: ServerSource, *, target: str | None,
                requests: int = 12, seed: int = 0, timeout: float = 300.0, levels: int = 5, gap: float = DEFAULT_GAP,
                log: Callable[[str], None] = print) -> tuple[list[str], list[PoolVerdict], str, list[str]]:
    """``(what moved, one verdict per pool, vLLM version seen, notes)``; see the module docstring."""
    if requests < 4:
        raise ValueError(f"a review sample needs at least 4 requests per pool, got {requests}")
    missing = sorted(set(record["pools"]) - set(pools))
    if missing:
        raise ValueError(f"the pools {missing} of the plan are not in the pool file given")
    t = Thresholds(**record["thresholds"])
    engine = Engine(**record["engine"])
    findings, stale, notes = preflight(record, target)
    verdicts: dict[str, PoolVerdict] = {}
    for name, why in stale.items():
        verdicts[name] = PoolVerdict(name, "turn off", None, [why])
    moved = {}
    for name, p in record["pools"].items():
        d = mix_distance(p["mix"], pools[name].mix)
        if d > t.tolerance:
            moved[name] = f"the traffic mix moved by {d:.0%} (tolerance {t.tolerance:.0%}): {pools[name].mix}"
    todo = [n for n, p in record["pools"].items() if n not in verdicts and p["config"] is not None]
    replan = any(not f.startswith("pool ") for f in findings)  # a target or tokenizer change re-plans every pool
    timed = todo + [n for n, p in record["pools"].items() if n not in verdicts and n not in todo and p.get("off_steps")
                    and n not in moved and not replan]  # a pool planned off is timed only where nothing else moved
    version = ""
    off_runs: dict[str, PoolRun] = {}
    if timed:
        log(f"measuring off on {', '.join(timed)}")
        off_runs = _measure(source, Candidate("off", "off"), [pools[n] for n in timed], requests, seed, timeout)
        version = next(iter(off_runs.values())).vllm_version
    cal_offs = {n: calibrate(run, gap=gap, engine=engine) for n, run in off_runs.items()}
    slower, unseen = engine_speed(record, cal_offs, t.speed)
    notes += unseen
    for name, why in slower.items():
        moved[name] = f"{moved[name]}; {why}" if name in moved else why
    notes += [f"pool {n}: the record holds no step times (planned before they were recorded), so a change of "
              "hardware cannot be seen; re-plan to record them" for n, p in record["pools"].items()
              if n not in verdicts and not p.get("off_steps") and n not in moved and not replan]
    vllm_moved = bool(version) and version != record["vllm_version"]
    if vllm_moved:
        findings.append(f"vLLM changed: {record['vllm_version']} -> {version}")
    general = [f for f in findings if not f.startswith("pool ")]
    for name in todo:
        p, pool = record["pools"][name], pools[name]
        cand = candidate_of(p["config"], p["candidate"])
        log(f"measuring {cand.name} on {name}")
        try:
            run = _measure(source, cand, [pool], requests, seed, timeout,
                           burst=engine.max_num_seqs if cand.schedule is not None else 0)[name]
        except ServerRefused as exc:
            verdicts[name] = PoolVerdict(name, "turn off", None, [f"vLLM refuses the configuration now: {exc.reason}"])
            continue
        except (ServerDied, MeasurementError, TimeoutError) as exc:
            verdicts[name] = PoolVerdict(name, "re-plan", p["config"], [f"the configuration could not be measured: "
                                                                         f"{exc}"])
            continue
        verdicts[name] = _judge(name, p, pool, cand, run, off_runs[name], cal_offs[name], engine, t, levels, seed, gap,
                                general + [f for f in findings if f.startswith(f"pool {name}:")] +
                                ([moved[name]] if name in moved else []))
    for name, p in record["pools"].items():
        if name in verdicts:
            continue
        reasons = general + ([moved[name]] if name in moved else [])
        verdicts[name] = PoolVerdict(name, "re-plan" if reasons else "keep", None,
                                     reasons or ["planned off; nothing it rested on moved"])
    return findings, [verdicts[n] for n in record["pools"]], version, notes


def _judge(name: str, p: dict, pool: VllmPool, cand: Candidate, run: PoolRun, off_run: PoolRun, cal_off: Calibration,
           engine: Engine, t: Thresholds, levels: int, seed: int, gap: float, moved: list[str]) -> PoolVerdict:
    cal_on = calibrate(run, gap=gap, engine=engine)
    rates = rates_for(*pool.rates, levels)
    slo = SLO(pool.ttft_s, pool.tpot_s)
    on = predict_calibrated(cand, dataclasses.replace(cal_on, items=cal_off.items), run.cache.tokens, engine, rates,
                            slo, pool.objective, seed=seed)
    off = predict_calibrated(Candidate("off", "off"), cal_off, off_run.cache.tokens, engine, rates, slo,
                             pool.objective, seed=seed)
    best = [max(a["score"], b["score"]) for a, b in zip(on, off)]
    exact = (not pool.sampling.greedy) or all(a.token_ids == b.token_ids for a, b in zip(run.streams, off_run.streams))
    a = assess(cand.name, on, off, best, t, pool.objective, exact, p.get("overload_floor", 0.0))
    measured = {"accepted_per_draft": cal_on.accepted_per_draft, "planned_accepted_per_draft": p["accepted_per_draft"],
                "worst_vs_off": a.worst_vs_off, "gain": a.gain, "tpot_gain": a.tpot_gain, "exact": exact}
    if not a.eligible:
        return PoolVerdict(name, "turn off", None, [f"{cand.name} no longer pays on a fresh sample: {a.why_not}"]
                           + moved, measured)
    old = p["accepted_per_draft"]
    drift = abs(cal_on.accepted_per_draft - old) / max(old, 0.05)
    reasons = list(moved)
    if drift > t.tolerance:
        reasons.append(f"accepted tokens per drafting step moved {old:.2f} -> {cal_on.accepted_per_draft:.2f} "
                       f"({drift:.0%}, tolerance {t.tolerance:.0%})")
    if reasons:
        return PoolVerdict(name, "re-plan", p["config"], reasons + [f"{cand.name} still pays on the sample "
                                                                    f"({a.gain:+.0%} at best)"], measured)
    return PoolVerdict(name, "keep", p["config"], [f"{cand.name} still pays ({a.gain:+.0%} at best, never below "
                                                   f"{a.worst_vs_off:.2f}x off) and nothing it rested on moved"],
                       measured)


def write_review(out: str | Path, findings: list[str], verdicts: list[PoolVerdict], version: str,
                 notes: list[str] = ()) -> Path:
    """``review.md`` and ``review_result.json`` plus each pool's new ``<pool>.speculative_config.json``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# specdec review (vLLM)", "", f"vLLM now: {version or '(not measured)'}", ""]
    lines += ["## What moved", ""] + ([f"- {f}" for f in findings] or ["- nothing"]) + [""]
    if notes:
        lines += ["## Not checked", ""] + [f"- {n}" for n in notes] + [""]
    lines += ["| pool | verdict | speculative_config | why |", "|---|---|---|---|"]
    for v in verdicts:
        lines.append(f"| {v.pool} | **{v.verdict}** | `{json.dumps(v.config)}` | {'; '.join(v.reasons)} |")
        (out / f"{v.pool}.speculative_config.json").write_text(json.dumps(v.config, indent=1) + "\n")
    (out / "review.md").write_text("\n".join(lines) + "\n")
    (out / "review_result.json").write_text(json.dumps({"vllm_version": version, "findings": findings,
                                                        "notes": list(notes),
                                                        "pools": [dataclasses.asdict(v) for v in verdicts]}, indent=1))
    return out / "review.md"
