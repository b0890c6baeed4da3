"""``specdec review``: re-measure a plan's basis; flag fingerprint changes and acceptance drift.

    specdec review plan_report                  # exit status 1 when the setting is stale
    specdec review --engine vllm plan_vllm      # keep / re-plan / turn off per pool (specdec.cli.plan_vllm)
"""

from __future__ import annotations

from pathlib import Path

from ..models import load_target
from ..proposers.registry import make_proposer
from ..measure.proposer_stats import artifact_dict, build_workload, fingerprints, measure_proposer
from ..plan.review import compare, load_trigger, review_markdown
from . import plan_vllm
from .args import model_spec, probability
from .common import log


def register(subparsers) -> None:
    """Add ``review`` to an ``argparse`` subparsers object."""
    r = subparsers.add_parser("review", help="re-measure a plan's basis; flag fingerprint changes and acceptance drift")
    r.add_argument("report", help="a plan's output directory (or its review.json)")
    r.add_argument("--model", "--target", dest="model", type=model_spec, default=None,
                   help="target to review against (default: the plan's)")
    r.add_argument("--tolerance", type=probability, default=None, help="override the plan's drift tolerance")
    r.add_argument("--out", default=None, help="directory to write review.md into (default: beside review.json)")
    plan_vllm.add_review_args(r)
    r.set_defaults(func=run_review)


def review_path(out: str | None, base: Path) -> Path:
    """Where review.md goes: into the ``--out`` directory (created), else beside the plan's review.json."""
    out_dir = Path(out) if out else base
    if out_dir.exists() and not out_dir.is_dir():
        raise SystemExit(f"--out {out}: exists and is not a directory (review writes review.md into it)")
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / "review.md"


def run_review(args) -> int:
    if getattr(args, "engine", "specdec") == "vllm":
        return plan_vllm.run_review(args)
    plan_vllm.check_review_flags(args)
    trigger = load_trigger(args.report)
    target = args.model or trigger["target"]
    log(f"loading target {target}")
    model, tok, _ = load_target(target)
    fps = fingerprints(model, tok)
    wl_desc = trigger["workload"]
    base = Path(args.report) if Path(args.report).is_dir() else Path(args.report).parent
    wl = build_workload(
        model,
        tok,
        wl_desc["path"],
        categories=wl_desc["categories"],
        per_category=wl_desc["per_category"],
        max_new_tokens=wl_desc["max_new_tokens"],
        target_fp=fps["target"],
        cache_dir=base / ".cache",
    )
    artifacts, acceptance = {}, {}
    for spec in trigger["proposers"]:
        try:
            if trigger["proposers"][spec].get("acceptance_from"):
                # imported from an engine: a replay here is not comparable, so only the artifact is checked
                artifacts[spec] = artifact_dict(make_proposer(spec, model, tok))
                continue
            m = measure_proposer(spec, model, tok, wl, int(trigger["budget"]))
        except (ValueError, OSError) as e:  # e.g. heads refusing a new checkpoint: reported as a finding
            log(f"{spec}: {e}")
            continue
        artifacts[spec], acceptance[spec] = m.artifact, m.acceptance
    flags = compare(trigger, fps, artifacts, acceptance, args.tolerance)
    text = review_markdown(trigger, flags, acceptance, target=target)
    out = review_path(args.out, base)
    out.write_text(text)
    print(text)
    return 1 if flags else 0
