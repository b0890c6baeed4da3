"""``specdec check``: is this proposer artifact usable with this target, and how well did it do?

Reports the binding, its fingerprint against the one computed now, and the last measurement in the
manifest. Exit 0 when compatible, 1 when not (``--allow-mismatch``: 0).
"""

from __future__ import annotations

import json
import os
import sys

from .args import PROPOSER_SPECS, add_model_args, proposer_spec
from ..artifacts import (MANIFEST_NAME, read_manifest, refit_command, target_fingerprint, tokenizer_fingerprint,
                        tokenizer_mismatch)

LOOKUP_PROPOSERS = ("suffix",)
_KINDS = {"medusa": "medusa", "eagle": "eagle", "draft": None}  # spec prefix -> the manifest kind it must name


def check(target_spec: str, proposer: str, *, device: str = "cpu") -> dict:
    """JSON-able report with ``compatible`` for ``proposer`` (any proposer spec, ``none``, or an
    artifact directory) against the target."""
    from ..models import load_target

    kind, sep, warm_file = proposer.partition(":")
    if proposer == "none":
        return {"proposer": proposer, "bound_to": "nothing", "compatible": True,
                "reason": "plain decoding: nothing is drafted, nothing can go stale"}
    expected_kind = None
    if sep and kind in _KINDS:
        expected_kind, proposer = _KINDS[kind], warm_file
    if proposer in LOOKUP_PROPOSERS or kind in LOOKUP_PROPOSERS:
        report = {"proposer": proposer, "bound_to": "nothing", "compatible": True,
                  "reason": "lookup proposers hold no weights: they survive every checkpoint swap"}
        if warm_file:
            from ..proposers.suffix import read_documents

            docs = read_documents(warm_file)  # ValueError naming the file / line when unusable
            model, _, _ = load_target(target_spec, device=device)
            vocab = int(model.get_output_embeddings().weight.shape[0])
            top = max((max(d) for d in docs if d), default=-1)
            report.update({"warm_documents": len(docs), "warm_tokens": sum(len(d) for d in docs),
                           "note": "the warm-start responses are token ids of the tokenizer that produced them; "
                                   "after a tokenizer change they only cost acceptance, never exactness"})
            if top >= vocab:
                report.update(compatible=False, reason=f"{warm_file} holds token id {top}, outside the target's "
                                                       f"vocabulary of {vocab}")
        return report
    if not os.path.isdir(proposer):
        raise FileNotFoundError(f"--proposer {proposer!r} is neither {LOOKUP_PROPOSERS} nor a directory")
    model, tok, _ = load_target(target_spec, device=device)
    if os.path.isfile(os.path.join(proposer, MANIFEST_NAME)):
        m = read_manifest(proposer)
        if expected_kind is not None and m.kind != expected_kind:
            raise ValueError(f"{kind}:{proposer} names a {m.kind!r} artifact ({proposer}/{MANIFEST_NAME}), "
                             f"not a {expected_kind!r} one")
        now = target_fingerprint(model) if m.bound_to == "target" else tokenizer_fingerprint(tok)
        ok = now == m.fingerprint
        report = {"proposer": proposer, "name": m.name, "kind": m.kind, "bound_to": m.bound_to,
                  "artifact_fingerprint": m.fingerprint, "current_fingerprint": now, "compatible": ok,
                  "version": m.weights_fingerprint, "created": m.created,
                  "last_measured": m.last_measured()}
        held = m.training.get("heldout", {})
        if held:
            report["heldout_top1"] = held.get("top1")
        refit = refit_cost(m.training)
        if refit:
            report["refit"] = refit
        if not ok:
            report["reason"] = (f"built for {m.bound_to} {m.fingerprint}, current is {now}"
                                + (f"; retrain with `{refit_command(m.kind)}`"
                                   if m.bound_to == "target" else ""))
        return report
    if os.path.isfile(os.path.join(proposer, "config.json")):
        from transformers import AutoTokenizer

        draft_tok = AutoTokenizer.from_pretrained(proposer, local_files_only=True)
        problems = tokenizer_mismatch(draft_tok, tok)
        return {
            "proposer": proposer,
            "kind": "draft_model",
            "bound_to": "tokenizer",
            "artifact_fingerprint": tokenizer_fingerprint(draft_tok),
            "current_fingerprint": tokenizer_fingerprint(tok),
            "compatible": not problems,
            "mismatch": problems,
            "last_measured": None,
        }
    raise ValueError(f"{proposer} holds neither {MANIFEST_NAME} (a specdec artifact) nor config.json (a HF drafter)")


def check_main(args) -> int:
    report = check(args.model, args.proposer, device=args.device)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        status = "COMPATIBLE" if report["compatible"] else "INCOMPATIBLE"
        print(f"{report['proposer']}: {status} (bound to {report['bound_to']})")
        for key in ("artifact_fingerprint", "current_fingerprint", "reason", "mismatch", "heldout_top1", "refit"):
            if report.get(key) is not None:
                print(f"  {key}: {report[key]}")
        last = report.get("last_measured")
        if last is not None:
            # manifests before 0.2 recorded tokens per step as "mean_accepted"
            brief = {("tokens_per_step" if k == "mean_accepted" else k): last[k]
                     for k in ("tokens_per_step", "mean_accepted", "accepted_drafts_per_step", "budget", "kind", "date")
                     if k in last}
            print(f"  last_measured: {brief} (--json for everything, including the command)")
        if report.get("last_measured") is None and report["bound_to"] != "nothing":
            print("  last_measured: none recorded")
    if not report["compatible"] and args.allow_mismatch:
        print("warning: incompatible, but --allow-mismatch was given", file=sys.stderr)
        return 0
    return 0 if report["compatible"] else 1


def refit_cost(training: dict) -> dict | None:
    """Recorded time from a new checkpoint to this artifact (features, load, data, training)."""
    seconds = training.get("seconds")
    if not isinstance(seconds, dict) or "total" not in seconds:
        return None
    extract = sum(f.get("extract_seconds", 0.0) for f in training.get("features", []))
    return {
        "seconds": round(seconds["total"] + extract, 1),
        "extract_seconds": round(extract, 1),
        "train_seconds": seconds.get("train"),
        "device": training.get("device"),
    }


def _spec_or_dir(text: str) -> str:
    return text if os.path.isdir(text) else proposer_spec(text)


def register(subparsers) -> None:
    """Add ``check`` to a ``specdec`` argparse sub-parser collection."""
    p = subparsers.add_parser("check", help="report a proposer artifact's compatibility and last measured acceptance")
    add_model_args(p)
    p.add_argument(
        "--proposer", required=True, type=_spec_or_dir, help=f"{PROPOSER_SPECS}, or an artifact / HF drafter directory"
    )
    p.add_argument("--allow-mismatch", action="store_true", help="report an incompatible artifact but exit 0")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=check_main)
