"""What a vLLM plan writes in its output folder: per pool ``<pool>.speculative_config.json`` (exactly
what ``--speculative-config`` takes; ``null``: off) and ``goodput_<pool>.png``; ``report.md``,
``plan.json`` (every number), ``review.json`` (:mod:`.record`) and ``runs/`` (every measured run)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from .candidates import BOUND
from .decide import Thresholds, describe
from .run_plan import SIMULATION, PlanResult, PoolOutcome
from .record import PoolRecord, make_record, model_fingerprint
from .schedule import gain_table_markdown


def plot_pool(o: PoolOutcome, path: Path) -> None:
    """Predicted score against offered load, one line per candidate, its band shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rows in o.predictions.items():
        x = [r["rate"] for r in rows]
        chosen = name == o.decision.chosen.name
        line, = ax.plot(x, [r["score"] for r in rows], marker="o", lw=2.5 if chosen else 1.2,
                        label=name + (" (chosen)" if chosen else ""))
        ax.fill_between(x, [r["lo"] for r in rows], [r["hi"] for r in rows], color=line.get_color(), alpha=0.12)
    ax.set_xscale("log")
    ax.set_xlabel(f"offered load, pool {o.pool.name} (requests/s)")
    ax.set_ylabel("goodput (req/s meeting TTFT and TPOT)" if o.pool.objective == "latency"
                  else "good output tokens/s")
    ax.set_title(f"{o.pool.name}: predicted from the measured servers (band: cost fit and seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pool_markdown(o: PoolOutcome, png: str, t: Thresholds) -> list[str]:
    p, d = o.pool, o.decision
    cfg = d.config
    lines = [f"## Pool `{p.name}` ({p.objective}: TTFT <= {p.ttft_s:g} s, TPOT <= {p.tpot_s * 1e3:g} ms; "
             f"{p.share:.0%} of traffic, {p.rates[0]:g}-{p.rates[1]:g} req/s)", "",
             f"**Decision: {d.sentence}.**", "",
             f"`{p.name}.speculative_config.json`: `{json.dumps(cfg)}`", ""]
    if cfg is not None:
        lines += ["Serve it with:", "", "```", f"--speculative-config {shlex.quote(json.dumps(cfg))}", "```", ""]
    lines += [f"Measured on {len(p.prompts)} prompts ({', '.join(f'{c} {s:.0%}' for c, s in p.mix.items())}), "
              f"sampling {json.dumps(p.sampling.body())}.", "", f"![goodput against load]({png})", "",
              "| candidate | " + " | ".join(f"{r:.3g} req/s" for r in o.rates) + " | outputs = off | "
              "accepted / drafting step | step-cost fit (leave-one-out) |",
              "|---|" + "---:|" * len(o.rates) + "---|---:|---:|"]
    for name, rows in o.predictions.items():
        cal = o.cals[name]
        ex = {True: "yes", False: "**NO**", None: "sampled"}[o.exact.get(name)]
        acc = "-" if cal.acceptance is None else f"{cal.accepted_per_draft:.2f}"
        cells = " | ".join(f"{r['score']:.3g} ({r['lo']:.3g}-{r['hi']:.3g}){'' if r['sustained'] else ' ‡'}"
                           for r in rows)
        lines.append(f"| {name} | {cells} | {ex} | {acc} | {cal.cost.mean_rel_error:.0%} "
                     f"({cal.cost.loo_rel_error:.0%}) |")
    lines += ["", "In brackets: the band (acceptance seeds, and every step slower and faster by the cost fit's "
              "leave-one-out error, widened by the drift below). "
              "Where it is wide, the load is near the knee and only a measurement settles it. "
              "‡: the configuration does not keep up (a queue that grows with every request).",
              "", "Assessment against off (the rule is in `specdec/plan/vllm/decide.py`):", ""]
    for a in d.assessments.values():
        verdict = "eligible" if a.eligible else f"refused: {a.why_not}"
        over = (f" (a gain not counted at {', '.join(f'{r:.3g}' for r in a.overloaded)} req/s: neither it nor off "
                "keeps up there)") if a.overloaded else ""
        if not a.counted:
            lines.append(f"- `{a.name}`: no load counted{over}; {verdict}")
            continue
        lines.append(f"- `{a.name}`: worst {a.worst_vs_off:.2f}x off, best {a.gain:+.1%} at {a.gain_rate:.3g} req/s, "
                     f"median TPOT {-a.tpot_gain:+.0%} at best{over}; {verdict}")
    lines += ["", _noise_line(o, t.max_loss), "", _drift_line(o)]
    lines += ["", "Memory (KV blocks the server allocated; requests of the pool's mean length that fit at once):", "",
              "| candidate | KV blocks (predicted) | admitted | given up to the drafter | after max_num_seqs |",
              "|---|---:|---:|---:|---:|"]
    for name, m in o.memory.items():
        pred = "-" if m["blocks_predicted"] is None else str(m["blocks_predicted"])
        lines.append(f"| {name} | {m['blocks']} ({pred}) | {m['admitted']} | {m['given_up']} | "
                     f"{m['effective_given_up']} |")
    for family, table in o.gains.items():
        lines += ["", f"Gain of `{family}` over off per batch size (output tokens/s ratio, blended (measured / "
                  f"model, steps measured)); the schedule keeps K > 0 where the best is at least {1 + t.margin:.2f} "
                  "and was measured (a size not measured takes the next larger measured size's K; none past the "
                  "largest):",
                  ""] + gain_table_markdown(table)
    sched = [c for c in o.candidates.values() if c.schedule is not None]
    for c in sched:
        no_draft = o.models[c.name].no_draft
        priced = ("its family's fit (no step without drafts was measured)" if no_draft is None else
                  f"off's times {no_draft.meta['scaled']:.2f}, the K = 0 tax measured at "
                  f"{', '.join(map(str, no_draft.meta['no_draft_tax_at']))} running requests")
        lines += ["", f"Schedule measured: {describe(c)}; its steps without drafts priced at {priced}."]
    if o.skipped:
        lines += ["", "Not used on this pool:", ""] + [f"- `{n}`: {why}" for n, why in o.skipped.items()]
    return lines + [""]


def _noise_line(o: PoolOutcome, bar: float) -> str:
    """What a loss at an overload had to exceed (``bar``: ``max_loss``), and why (:mod:`.burst_noise`)."""
    n = o.noise
    if not n.dof:
        why = "one burst per candidate" if n.bursts < 2 else "no candidate's bursts ran three full-batch steps each"
        return (f"Overload: {why}, so how far one burst's full-batch steps vary was not measured; a loss in output "
                f"tokens/s where neither keeps up counted beyond {bar:.0%}.")
    return (f"Overload: one burst's full-batch steps varied by {n.sigma:.1%} (log spread over {n.bursts} bursts per "
            f"candidate, {n.dof} degrees of freedom), so a loss in output tokens/s where neither keeps up counted "
            f"beyond {max(bar, o.overload_floor):.0%}{' with the drift below' if o.drift.told else ''}.")


def _drift_line(o: PoolOutcome) -> str:
    """Whether the machine kept its speed while the plan measured (:mod:`.drift`)."""
    d = o.drift
    if d.shift is None:
        return ("Drift: not measured (the check was left out or failed, or its bursts ran too few full-batch "
                "steps), so the bands assume the machine kept its speed throughout.")
    noise = ("its bursts' noise was not measured" if d.se is None else
             f"{'beyond' if d.told else 'within'} the bursts' noise, standard error {d.se:.1%}")
    return (f"Drift: off's full-batch step took {d.factor:.3f}x its first bursts' time when run again after the last "
            f"candidate ({d.bursts} bursts; {noise}); every band is widened by it.")


def pool_record(o: PoolOutcome) -> PoolRecord:
    c = o.decision.chosen
    cal = o.cals[c.name]
    return PoolRecord(c.config, c.name, BOUND[c.method], c.artifact, model_fingerprint(c.artifact),
                      cal.accepted_per_draft, cal.accepted_per_row_step, o.pool.mix, o.pool.describe(),
                      o.decision.sentence, {str(rows): s for rows, s in o.cals["off"].step_seconds().items()},
                      o.overload_floor)


def write(result: PlanResult, out: str | Path, *, serve: str | None, servers: dict | None) -> Path:
    """Write every file of the module docstring; returns the report's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    s = result.settings
    lines = ["# Speculation plan for a vLLM deployment", "",
             f"vLLM {result.vllm_version or '(version not reported)'}; target {s.target or '(not a local folder)'}; "
             f"max_num_seqs {s.engine.max_num_seqs}, max_num_batched_tokens {s.engine.max_batched_tokens}.", "",
             "Every number below was measured on the servers this plan started (or was given), from outside: "
             "step times from the token stream, acceptance from `/metrics`, KV blocks from "
             "`vllm:cache_config_info`. Goodput is predicted from them by specdec's simulator of vLLM's "
             "scheduler at each pool's load.", "", "| pool | decision | speculative_config |", "|---|---|---|"]
    for name, o in result.pools.items():
        lines.append(f"| {name} | {o.decision.sentence} | `{json.dumps(o.decision.config)}` |")
    lines.append("")
    if result.refused or result.failed:
        lines += ["## Candidates that could not be measured", ""]
        lines += [f"- `{n}`: vLLM refused to start it: {why}" for n, why in result.refused.items()]
        lines += [f"- `{n}`: {why}" for n, why in result.failed.items()]
        lines.append("")
    plan_json = {"vllm_version": result.vllm_version, "refused": result.refused, "failed": result.failed,
                 "engine": vars(s.engine), "thresholds": vars(s.thresholds),
                 "simulation": {k: getattr(s, k) for k in SIMULATION}, "pools": {}}
    records = {}
    for name, o in result.pools.items():
        png = f"goodput_{name}.png"
        plot_pool(o, out / png)
        lines += _pool_markdown(o, png, s.thresholds)
        (out / f"{name}.speculative_config.json").write_text(json.dumps(o.decision.config, indent=1) + "\n")
        records[name] = pool_record(o)
        plan_json["pools"][name] = {
            "decision": o.decision.sentence, "chosen": o.decision.chosen.name, "speculative_config": o.decision.config,
            "rates": o.rates, "pool": o.pool.describe(), "predictions": o.predictions,
            "candidates": {n: c.config for n, c in o.candidates.items()}, "exact": o.exact, "memory": o.memory,
            "assessments": {n: vars(a) for n, a in o.decision.assessments.items()},
            "acceptance": {n: {"per_draft": c.accepted_per_draft, "per_row_step": c.accepted_per_row_step}
                           for n, c in o.cals.items()},
            "cost": {n: c.cost.to_dict() for n, c in o.cals.items()},
            "gains": {f: [vars(g) for g in table] for f, table in o.gains.items()}, "skipped": o.skipped,
            "overload_noise": vars(o.noise), "drift": vars(o.drift)}
    lines += ["## Review", "", "Run `specdec review --engine vllm " + str(out) + "` (with the same `--serve` or "
              "`--server`) after every model or vLLM release, or when a pool's traffic moves. It flags draft models "
              "and heads bound to an older checkpoint before measuring anything, re-measures a short sample, and "
              "says keep, re-plan or turn off, with the new config.", ""]
    (out / "report.md").write_text("\n".join(lines))
    (out / "plan.json").write_text(json.dumps(plan_json, indent=1, default=str))
    record = make_record(vllm_version=result.vllm_version, target=s.target, pools=records,
                         thresholds=vars(s.thresholds), engine=vars(s.engine), serve=serve, servers=servers)
    (out / "review.json").write_text(json.dumps(record, indent=1))
    return out / "report.md"
