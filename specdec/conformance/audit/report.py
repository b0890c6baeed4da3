"""An audit's report as Markdown (for people) and JSON (for tools), and where it is written.

:func:`write_report` writes ``audit.md``, ``audit.json`` and, for every biased or broken case of
an engine that can describe its own runs, a standalone reproducer
(:mod:`~specdec.conformance.audit.reproducer`) into one folder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from .runner import AuditReport, CaseResult


def _p(x: float) -> str:
    return "-" if x is None else "0" if x == 0 else f"{x:.2g}"


def _min_p(tests) -> float | None:
    return min((t.p_value for t in tests), default=None)


def case_row(report: AuditReport, c: CaseResult) -> str:
    """One Markdown table row (see :func:`markdown` for the columns)."""
    eng = report.engine
    verdict = c.verdict.verdict + (f" ({c.verdict.scope})" if c.verdict.scope else "")
    tv = c.observed_tv
    obs = "-" if not tv else f"{tv.get('speculative', math.nan):.3f} / " + (
        f"{tv['plain']:.3f}" if "plain" in tv else "-")
    det = "-" if c.power is None else (f"{c.power.min_tv:.3f}" if c.power.min_tv is not None else
                                      f"> {c.power.max_tv:.3f}")
    acc = "-" if c.accepted_per_request is None else f"{c.accepted_per_request:.2f}"
    note = (f"{c.verdict.reason}: {c.message}" if c.message else c.verdict.reason).replace("|", "\\|")
    note = note.replace("\n", " ")
    if len(note) > 240:
        note = note[:237] + "..."
    return (f"| {eng.get('engine', '?')} | {eng.get('method', '?')} | {c.setting} | {verdict} | "
            f"{_p(_min_p(c.spec_tests))} / {_p(_min_p(c.plain_tests))} / {_p(_min_p(c.two_sample))} | {obs} | {det} | "
            f"{acc} | {note} |")


HEADER = ("| engine | method | setting | verdict | min p: speculative / plain / two-sample | observed TV, tokens 1-2: "
          "speculative / plain | detectable TV | accepted drafts / request | note |\n"
          "|---|---|---|---|---|---|---|---|---|")


_SHORT = {"exact": "exact", "biased": "BIASED", "refused": "refused", "error": "ERROR", "inconclusive": "?"}


def matrix(reports: Sequence[AuditReport]) -> str:
    """One row per engine/method, one column per setting, each cell the case's verdict (``?``: inconclusive)."""
    settings = list(dict.fromkeys(c.setting for r in reports for c in r.cases))
    lines = ["| engine/method | " + " | ".join(settings) + " |", "|---|" + "---|" * len(settings)]
    for r in reports:
        cells = {c.setting: _SHORT.get(c.verdict.verdict, c.verdict.verdict) for c in r.cases}
        lines.append(f"| {r.engine.get('engine', '?')}/{r.engine.get('method', '?')} | "
                     + " | ".join(cells.get(s, "") for s in settings) + " |")
    return "\n".join(lines) + "\n"


def markdown(reports: Sequence[AuditReport]) -> str:
    """The verdict matrix, the table of every case, then each audit's settings and parameters."""
    lines = [matrix(reports), HEADER]
    for r in reports:
        lines += [case_row(r, c) for c in r.cases]
    for r in reports:
        cfg = r.config
        eng = r.engine
        lines += ["", f"**{eng.get('engine')}/{eng.get('method')}**: {len(cfg.prompts)} prompts x {cfg.samples} "
                      f"completions per setting part and arm, {cfg.length} tokens; windows {list(cfg.windows)}; "
                      f"family alpha {cfg.alpha}, {cfg.planned_tests} tests, per-test alpha {cfg.per_test_alpha:.2e}; "
                      f"{r.seconds:.0f} s. Engine: `{json.dumps(eng, default=str)}`"]
        lines += [f"- `{c.setting}`: {c.description}" for c in r.cases]
        if r.greedy is not None:
            g = r.greedy
            where = "-" if g.first_mismatch is None else str(g.first_mismatch)
            lines += [f"- greedy: **{g.verdict}**, {g.mismatched}/{g.prompts} outputs differ (rate "
                      f"{g.mismatch_rate:.3f}), first mismatch at token {where} of {g.tokens}; accepted drafts "
                      f"{g.accepted}{'; ' + g.message if g.message else ''}"]
    return "\n".join(lines) + "\n"


def _tests(tests) -> list[dict]:
    return [{"first": t.first, "last": t.k, "G": t.statistic, "dof": t.dof, "p": t.p_value,
             "impossible": t.impossible} for t in tests]


def to_json(report: AuditReport) -> dict:
    """Everything the report holds, as plain JSON types."""
    cfg = report.config
    cases = []
    for c in report.cases:
        power = None if c.power is None else {
            "min_tv": c.power.min_tv, "max_tv": c.power.max_tv, "power": c.power.power,
            "replicates": c.power.replicates, "null_rejections": c.power.null_rejections,
            "tried": [list(t) for t in c.power.tried]}
        cases.append({
            "setting": c.setting, "description": c.description, "verdict": c.verdict.verdict,
            "scope": c.verdict.scope, "reason": c.verdict.reason, "message": c.message,
            "speculative": _tests(c.spec_tests), "plain": _tests(c.plain_tests), "two_sample": _tests(c.two_sample),
            "observed_tv_tokens_1_2": c.observed_tv, "power": power, "requests": c.requests, "outputs": c.outputs,
            "drafted": c.drafted, "accepted": c.accepted, "accepted_per_request": c.accepted_per_request,
            "plain_outcome": c.plain_outcome, "extra": c.extra})
    greedy = None
    if report.greedy is not None:
        g = report.greedy
        greedy = {"verdict": g.verdict, "prompts": g.prompts, "tokens": g.tokens, "mismatch_rate": g.mismatch_rate,
                  "first_mismatch": g.first_mismatch, "positions": g.positions, "drafted": g.drafted,
                  "accepted": g.accepted, "message": g.message}
    return {"engine": report.engine, "seconds": report.seconds,
            "config": {"prompts": [list(p) for p in cfg.prompts], "samples": cfg.samples, "length": cfg.length,
                       "windows": [list(w) for w in cfg.windows], "alpha": cfg.alpha,
                       "per_test_alpha": cfg.per_test_alpha, "planned_tests": cfg.planned_tests, "seed": cfg.seed,
                       "plain_seed": cfg.plain_seed, "min_accepted": cfg.min_accepted, "max_tv": cfg.max_tv,
                       "settings": {k: v.describe() for k, v in cfg.settings.items()}},
            "cases": cases, "greedy": greedy}


def write_report(reports: Sequence[AuditReport], folder: Path, *, engines: Sequence | None = None) -> list[Path]:
    """Write ``audit.md``, ``audit.json`` and reproducers (for ``engines[i]`` of ``reports[i]`` when
    given) into ``folder``; returns the paths written."""
    from .reproducer import write_reproducers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    md, js = folder / "audit.md", folder / "audit.json"
    md.write_text(markdown(reports))
    js.write_text(json.dumps([to_json(r) for r in reports], indent=1, default=str) + "\n")
    written = [md, js]
    for i, r in enumerate(reports):
        if engines is not None:
            written += write_reproducers(r, engines[i], folder / "reproducers")
    return written
