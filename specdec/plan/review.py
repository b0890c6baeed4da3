"""``specdec review``: is a plan's speculation setting still valid?

A setting bets on one target, tokenizer, artifact and traffic mix; review re-measures what the plan
measured and flags ``target-changed`` / ``tokenizer-changed`` (fingerprints), ``artifact-changed``
(fingerprint or version), ``artifact-stale`` (binding no longer matches: refit) and
``acceptance-drift`` (accepted drafts per step moved beyond the relative tolerance, overall or in a
category).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Mapping

from ..estimate.acceptance import AcceptanceDist

TRIGGER_KIND = "specdec.review-trigger"


@dataclasses.dataclass(frozen=True)
class Flag:
    kind: str
    subject: str
    message: str


def make_trigger(*, target_spec: str, fingerprints: dict, workload: dict, budget: int, proposers: Mapping[str, dict],
                 tolerance: float) -> dict:
    """The review trigger a plan records (see the module docstring)."""
    _check_tolerance(tolerance)
    return {"kind": TRIGGER_KIND, "target": target_spec, "fingerprints": fingerprints, "workload": workload,
            "budget": budget, "tolerance": tolerance,
            "proposers": {spec: {"artifact": p["artifact"],
                                 "accepted_drafts_per_step": {c: a.expected_accepted(a.max_budget)
                                                              for c, a in p["acceptance"].items()},
                                 "acceptance_from": p.get("acceptance_from")}
                          for spec, p in proposers.items()}}


def load_trigger(path: str | Path) -> dict:
    """Read ``review.json`` (or the report directory holding it) and check its shape."""
    path = Path(path)
    if path.is_dir():
        path = path / "review.json"
    if not path.exists():
        raise ValueError(
            f"no review trigger at {path}: run `specdec plan` first (it writes review.json beside report.md)"
        )
    try:
        trig = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(trig, dict) or trig.get("kind") != TRIGGER_KIND:
        raise ValueError(f"{path} is not a specdec review trigger (expected kind={TRIGGER_KIND!r})")
    missing = {"fingerprints", "workload", "budget", "tolerance", "proposers", "target"} - set(trig)
    if missing:
        raise ValueError(f"{path} lacks {sorted(missing)}")
    return trig


def _check_tolerance(tolerance: float) -> float:
    if not 0 < tolerance < 1:
        raise ValueError(f"review tolerance must be in (0, 1), got {tolerance}")
    return tolerance


def compare(
    trigger: dict,
    fingerprints: dict,
    artifacts: Mapping[str, dict],
    acceptance: Mapping[str, Mapping[str, AcceptanceDist]],
    tolerance: float | None = None,
) -> list[Flag]:
    """Flags for everything that changed between the trigger and the new measurements."""
    tol = trigger["tolerance"] if tolerance is None else _check_tolerance(tolerance)
    flags: list[Flag] = []
    old_fp = trigger["fingerprints"]
    for key in ("target", "tokenizer"):
        if old_fp.get(key) != fingerprints.get(key):
            flags.append(
                Flag(
                    f"{key}-changed",
                    key,
                    f"{key} fingerprint {old_fp.get(key)} -> {fingerprints.get(key)}: "
                    "re-plan; acceptance and cost were measured on the old one",
                )
            )
    for spec, old in trigger["proposers"].items():
        new_art = artifacts.get(spec)
        if new_art is None:
            flags.append(Flag("artifact-missing", spec, f"proposer {spec} could not be loaded for review"))
            continue
        for key in ("fingerprint", "version"):
            if old["artifact"].get(key) != new_art.get(key):
                flags.append(
                    Flag(
                        "artifact-changed",
                        spec,
                        f"{spec} artifact {key} {old['artifact'].get(key)} -> {new_art.get(key)}",
                    )
                )
        bound = new_art.get("bound_to")
        if bound in ("target", "tokenizer") and new_art.get("fingerprint") != fingerprints.get(bound):
            flags.append(
                Flag(
                    "artifact-stale",
                    spec,
                    f"{spec} is bound to {bound} {new_art.get('fingerprint')} but the current "
                    f"{bound} is {fingerprints.get(bound)}: refit/rebuild it before use",
                )
            )
        # Imported acceptance (an engine's counters) is not what a replay here measures: re-import it.
        new_acc = acceptance.get(spec, {}) if not old.get("acceptance_from") else {}
        for cat, old_mean in _planned(old).items():
            if cat not in new_acc:
                continue
            a = new_acc[cat]
            new_mean = a.expected_accepted(a.max_budget)
            base = max(old_mean, 0.05)  # a near-zero baseline would turn noise into "infinite" drift
            if abs(new_mean - old_mean) / base > tol:
                flags.append(
                    Flag(
                        "acceptance-drift",
                        f"{spec}/{cat}",
                        f"accepted drafts/step {old_mean:.2f} -> {new_mean:.2f} "
                        f"({(new_mean - old_mean) / base:+.0%}, tolerance {tol:.0%})",
                    )
                )
    return flags


def _planned(proposer: dict) -> dict:
    """Planned accepted drafts per step by category (plans before 0.2 named it ``mean_accepted``)."""
    return proposer.get("accepted_drafts_per_step", proposer.get("mean_accepted", {}))


def review_markdown(
    trigger: dict, flags: list[Flag], acceptance: Mapping[str, Mapping[str, AcceptanceDist]], target: str | None = None
) -> str:
    """The review report; ``target``: what was reviewed (default: the plan's own target)."""
    reviewed = target or trigger["target"]
    planned = "" if reviewed == trigger["target"] else f" (the plan measured {trigger['target']})"
    lines = ["# specdec review", "", f"Target: {reviewed}{planned}", ""]
    if flags:
        lines += [f"**{len(flags)} finding(s): the speculation setting is stale; re-run `specdec plan`.**", ""]
        lines += [f"- `{f.kind}` {f.subject}: {f.message}" for f in flags]
    else:
        lines.append("No fingerprint changed and acceptance is within tolerance: the setting stands.")
    imported = {spec: old["acceptance_from"] for spec, old in trigger["proposers"].items()
                if old.get("acceptance_from")}
    lines += [f"- `{spec}`: acceptance was imported from {src}, not measured here, so it was not re-checked; "
              "re-import it from the engine's counters." for spec, src in imported.items()]
    lines += ["", "| proposer | category | planned accepted drafts/step | now |", "|---|---|---|---|"]
    for spec, old in trigger["proposers"].items():
        for cat, old_mean in _planned(old).items():
            a = acceptance.get(spec, {}).get(cat)
            now = ("imported" if spec in imported else
                   f"{a.expected_accepted(a.max_budget):.2f}" if a is not None else "n/a")
            lines.append(f"| {spec} | {cat} | {old_mean:.2f} | {now} |")
    return "\n".join(lines) + "\n"
