"""Plan reports: markdown a person can act on, PNG plots of goodput vs load, and the review trigger.

``review.json`` records the basis (fingerprints, artifact versions, accepted drafts per step by
category, workload selection) for ``specdec review`` to re-measure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from .planner import POLICY_ORDER, PoolPlan, gated_goal
from .pools import dump_pools

_LIFECYCLE = {
    "nothing": "bound to nothing: survives every checkpoint swap, no artifact to maintain",
    "tokenizer": "bound to the tokenizer: a second model to version; still valid across target releases that keep "
                 "the tokenizer",
    "target": "bound to one target checkpoint: must be refit on every target release",
}


def plot_pool(pp: PoolPlan, path: Path) -> None:
    """Goodput (and p50 TPOT) vs offered load, one panel per proposer, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(pp.proposers)
    fig, axes = plt.subplots(2, n, figsize=(5.5 * n, 7), squeeze=False)
    for j, prop in enumerate(pp.proposers):
        for policy in POLICY_ORDER:
            rows = sorted((r for r in prop.rows if r["policy"] == policy), key=lambda r: r["rate"])
            if not rows:
                continue
            x = [r["rate"] for r in rows]
            axes[0][j].plot(x, [r["goodput_rps"] for r in rows], marker="o", label=policy)
            axes[1][j].plot(x, [r["tpot_p50"] * 1e3 for r in rows], marker="o", label=policy)
        axes[0][j].set_title(f"{pp.pool.name}: {prop.proposer}")
        axes[0][j].set_ylabel("goodput (req/s meeting SLOs)")
        axes[1][j].set_ylabel("p50 time per output token (ms)")
        axes[1][j].axhline(pp.pool.slo.tpot_s * 1e3, color="grey", ls="--", lw=1, label="TPOT SLO")
        axes[1][j].set_yscale("log")
        for ax in axes[:, j]:
            ax.set_xlabel("offered load (req/s)")
            ax.axvline(pp.capacity_rps, color="grey", ls=":", lw=1)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def pool_markdown(pp: PoolPlan, plot_name: str) -> list[str]:
    lines = [
        f"## Pool `{pp.pool.name}` (TTFT <= {pp.pool.slo.ttft_s:g} s, TPOT <= {pp.pool.slo.tpot_s * 1e3:g} ms)",
        "",
        f"**Verdict: {pp.verdict}.**",
        "",
        f"Saturation without speculation: {pp.capacity_rps:.3g} req/s.",
        "",
        f"![goodput vs load]({plot_name})",
        "",
    ]
    for prop in pp.proposers:
        ok, worst = gated_goal(prop.rows)
        fragile = fragile_rows(prop.rows)
        lines += [
            f"### {prop.proposer}",
            "",
            f"- draft budget {prop.budget} (best at batch 1); speculation stops paying above batch {prop.threshold} "
            f"(gate: off above {prop.threshold}, on at <= {prop.on_below})",
            f"- admitted concurrency under the memory budget: {prop.admitted_off} without the proposer, "
            f"{prop.admitted_on} with it",
            f"- chosen policy: **{prop.chosen_policy}**; worst goodput ratio to the best policy at any load: "
            + ", ".join(f"{p} {prop.worst_ratio[p]:.3f}" for p in POLICY_ORDER if p in prop.worst_ratio),
            f"- goal gated >= max(off, always) - 2% at every load: {'met' if ok else 'NOT met'} (worst ratio "
            f"{worst:.3f})"
            if math.isfinite(worst)
            else "- gated policy not simulated (speculation never pays in throughput)",
        ]
        if "goodput_lo" in prop.rows[0]:
            lines.append(
                "- in brackets: goodput with every target step slower and faster by the cost band; "
                + (f"that range spans more than {FRAGILE:.0%} of the goodput at "
                   f"{', '.join(f'{r:.3g}' for r in fragile)} req/s: there the prediction rests on the cost "
                   "model's accuracy, so measure before relying on it"
                   if fragile else f"that range spans less than {FRAGILE:.0%} of the goodput at every load")
            )
        lines += [
            "",
            "| load (req/s) | policy | goodput | SLO met | tok/s | TTFT p50/p99 (s) | TPOT p50/p99 (ms) | batch | "
            "cost vs off |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(prop.rows, key=lambda r: (r["rate"], POLICY_ORDER.index(r["policy"]))):
            lines.append(
                f"| {r['rate']:.3g} | {r['policy']} | {r['goodput_rps']:.3g}{_band(r)} | {r['slo_attainment']:.0%} | "
                f"{r['throughput_tok_s']:.3g} | {r['ttft_p50']:.2g}/{r['ttft_p99']:.2g} | "
                f"{r['tpot_p50'] * 1e3:.3g}/{r['tpot_p99'] * 1e3:.3g} | {r['mean_batch']:.2g} | "
                f"{r['cost_rel_off']:.2f} |"
            )
        lines.append("")
    return lines


FRAGILE = 0.2  # a row whose goodput band spans more than this fraction of its goodput is flagged


def _band(row: dict) -> str:
    """`` (lowest-highest)`` goodput under the cost band, or "" without a band."""
    if "goodput_lo" not in row:
        return ""
    lo, hi = sorted((row["goodput_lo"], row["goodput_hi"]))
    return f" ({lo:.3g}-{hi:.3g})"


def fragile_rows(rows: Sequence[dict]) -> list[float]:
    """Load levels where some policy's goodput band (``goodput_lo`` .. ``goodput_hi``, from
    ``sweep(cost_band=...)``) spans more than :data:`FRAGILE` of its goodput."""
    out = set()
    for r in rows:
        if "goodput_lo" in r and abs(r["goodput_hi"] - r["goodput_lo"]) > FRAGILE * max(r["goodput_rps"], 1e-9):
            out.add(r["rate"])
    return sorted(out)


_TERMS = ("1", "B", "B*n", "B*n*(C+(n+1)/2)", "B*C", "B*[n>1]")  # the step-cost model's features, in order


def write_report(
    out_dir: Path,
    *,
    title: str,
    context: dict,
    cost,
    proposers: Sequence[dict],
    pool_plans: Sequence[PoolPlan],
    trigger: dict,
) -> Path:
    """Write ``report.md``, one ``goodput_<pool>.png`` per pool, ``plan.json``, ``review.json`` and
    ``pools.recommended.toml``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# {title}",
        "",
        "Speculation lowers per-request decode latency when there is spare compute; under load it spends "
        "compute on rejected drafts and memory on the drafter. This report says, per pool, whether it pays here.",
        "",
        "## Inputs",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in context.items()]
    lines += [
        "",
        "## Cost model (measured on this machine)",
        "",
        "- step time = " + " + ".join(f"{w:.3g}*{n}" for w, n in zip(cost.weights, _TERMS)) + " s",
        f"- fit error: mean {cost.mean_rel_error:.1%}, max {cost.max_rel_error:.1%}, leave-one-out "
        f"{cost.loo_rel_error:.1%} "
        f"over {len(cost.samples)} timings ({len(cost.outliers)} disturbed timings set aside)",
        f"- measured on: {cost.meta}",
        "",
        "## Proposers",
        "",
        "| proposer | bound to | lifecycle | mean accepted/step (all) | by category | memory fixed / per token |",
        "|---|---|---|---|---|---|",
    ]
    for p in proposers:
        acc = p["acceptance"]
        cats = ", ".join(f"{c} {a.expected_accepted(a.max_budget):.2f}" for c, a in sorted(acc.items()) if c != "all")
        if p.get("acceptance_from"):
            cats = f"imported from {p['acceptance_from']}, one histogram for every category"
        lines.append(
            f"| {p['spec']} | {p['artifact']['bound_to']} | {_LIFECYCLE[p['artifact']['bound_to']]} | "
            f"{acc['all'].expected_accepted(acc['all'].max_budget):.2f} | {cats} | "
            f"{p['memory'].fixed_bytes / 2**20:.1f} MiB / {p['memory'].bytes_per_token:.0f} B |"
        )
    lines.append("")
    plans_json = []
    for pp in pool_plans:
        name = f"goodput_{pp.pool.name}.png"
        plot_pool(pp, out_dir / name)
        lines += pool_markdown(pp, name)
        plans_json.append(
            {
                "pool": pp.pool.name,
                "verdict": pp.verdict,
                "capacity_rps": pp.capacity_rps,
                "proposers": [{k: v for k, v in vars(pr).items()} for pr in pp.proposers],
            }
        )
    lines += [
        "## Review trigger",
        "",
        "Re-run `specdec review " + str(out_dir) + "` after any target release, tokenizer change, proposer retrain or "
        "traffic shift. It re-measures acceptance on the same prompts and flags:",
        f"- target fingerprint {trigger['fingerprints']['target']} or tokenizer "
        f"{trigger['fingerprints']['tokenizer']} changed;",
        "- a proposer artifact's fingerprint or version changed;",
        f"- mean accepted tokens per step drifting more than {trigger['tolerance']:.0%} from the values above.",
        "",
    ]
    (out_dir / "report.md").write_text("\n".join(lines))
    (out_dir / "plan.json").write_text(json.dumps({"context": context, "pools": plans_json}, indent=1, default=str))
    (out_dir / "review.json").write_text(json.dumps(trigger, indent=1))
    (out_dir / "pools.recommended.toml").write_text(dump_pools({pp.pool.name: pp.recommended for pp in pool_plans}))
    return out_dir / "report.md"
