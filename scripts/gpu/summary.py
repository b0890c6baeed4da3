"""The GPU run's bookkeeping: step records, the machine's facts, and ``summary.md`` + ``results.json``.

Standard library only (it must run whatever failed before it). Every step of ``scripts/gpu/run.sh``
appends one record (rc, wall seconds, cap, command) to ``<state>/results/steps.jsonl``; the steps'
own JSON files lie beside it (``verify.json``, ``decoder.json``, ``train.json``); ``write`` renders
all of it, from every call so far, into ``<out>/summary.md`` and ``<out>/results.json``.

    python scripts/gpu/summary.py record --state S --call K --name NAME --rc RC --seconds T --cap C --command "..."
    python scripts/gpu/summary.py env --state S --call K
    python scripts/gpu/summary.py write --state S --out DIR
    python scripts/gpu/summary.py check-out DIR      (the 8 files / 16 MB / 2 folders rule)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

MAX_FILES, MAX_FILE_BYTES, MAX_DEPTH = 8, 16 * (1 << 20), 2


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def record(state: Path, call: int, name: str, rc: int, seconds: float, cap: int, command: str) -> None:
    res = state / "results"
    res.mkdir(parents=True, exist_ok=True)
    row = {"call": call, "step": name, "rc": rc, "seconds": seconds, "cap": cap,
           "timed_out": rc in (124, 137), "command": command, "at": time.strftime("%H:%M:%S", time.gmtime())}
    with open(res / "steps.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def env(state: Path, call: int) -> dict:
    py = ("import json, sys, torch\ntry:\n import transformers; tf = transformers.__version__\nexcept Exception as e:\n"
          " tf = f'unavailable ({e})'\nprint(json.dumps({'python': sys.version.split()[0], 'torch': torch.__version__, "
          "'cuda': torch.version.cuda, 'cuda_available': torch.cuda.is_available(), 'device': "
          "torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu', 'transformers': tf}))")
    facts = json.loads(_run([sys.executable, "-c", py]) or "{}")
    facts.update({"date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host_cpus": os.cpu_count(),
                  "platform": platform.platform(),
                  "nvidia_smi": _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem",
                                      "--format=csv,noheader"]),
                  "nvcc": ((_run(["nvcc", "--version"]) or "").splitlines() or [None])[-1]})
    stash = state / "stash"
    manifest = _load(stash / f"call{call}.json") or {}
    facts["lock"] = {**(manifest.get("lock") or {}), "carry_written_at_commit": manifest.get("written_at_commit")}
    path = state / "results" / "env.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    all_env = _load(path) or {}
    all_env[f"call{call}"] = facts
    path.write_text(json.dumps(all_env, indent=1))
    return facts


def _steps(state: Path) -> list[dict]:
    path = state / "results" / "steps.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _pytest_line(log: Path) -> dict | None:
    if not log.is_file():
        return None
    text = log.read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|skipped|error|deselected|selected)", ln)]
    failed = [ln for ln in text.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return {"summary": lines[-1].strip("= ") if lines else None, "failed": failed[:40]}


def _fmt(x, f=".3f"):
    return "-" if x is None else format(x, f) if isinstance(x, (int, float)) else str(x)


def _verify_md(v: dict, state: Path) -> list[str]:
    c = v["ceilings"]
    out = [f"Ceilings measured in the run: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write), matrix "
           f"{c['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s ({c['matmul_dtype']}, n = {c['matmul_n']}); HBM datasheet "
           f"4.8 TB/s. Heads (q, kv, dim) {v['heads']}, {v['dtype']}.", "",
           "| batch | prefix | tree | op ms | bound | flop/B | % roofline | % HBM | TFLOP/s | SDPA ms | x SDPA | "
           "flex ms | x flex | max err |", "|" + "---:|" * 14]
    for r in v["rows"]:
        out.append(f"| {r['batch']} | {r['prefix']} | {r['nodes']} | {r['op_ms']:.4f} | {r['bound']} | "
                   f"{r['flop_per_byte']:.0f} | {100 * r['roofline_frac']:.0f}% | {100 * r['hbm_frac']:.0f}% | "
                   f"{r['tflops']:.0f} | {_fmt(r.get('sdpa_ms'), '.4f')} | {_fmt(r.get('x_vs_sdpa'), '.2f')} | "
                   f"{_fmt(r.get('flex_ms'), '.4f')} | {_fmt(r.get('x_vs_flex'), '.2f')} | {r['max_err_b0']:.2g} |")
    notes = sorted({f"{k}: {r[k]}" for r in v["rows"] for k in r if k.endswith("_note")})
    if notes:
        out += ["", "Notes: " + "; ".join(notes[:10])]
    if v.get("skipped"):
        out += ["", f"Not run (time cap): {v['skipped']}"]
    s = v.get("summary")
    if s:
        out += ["", f"Goals: >= 70% of HBM where memory-bound: {s['memory_bound_rows_at_70pct_hbm']} of "
                    f"{s['memory_bound_rows']} memory-bound rows (best {100 * s['best_hbm_frac']:.0f}% over all rows); "
                    f">= 2x SDPA: {s['rows_at_2x_sdpa']} of {len(v['rows'])} rows (lowest "
                    f"{_fmt(s['min_x_vs_sdpa'], '.2f')}x)."
                    f" Worst case (lowest % roofline): batch {s['worst']['batch']}, prefix {s['worst']['prefix']}, "
                    f"tree {s['worst']['nodes']}: {100 * s['worst']['roofline_frac']:.0f}% of roofline."]
    for name, title in (("verify_profile.txt", "torch.profiler, worst case"), ("ncu_worst.txt", "ncu, worst case")):
        path = next(iter(sorted((state / "logs").rglob(name))), None)
        if path is not None:
            lines = path.read_text(errors="replace").splitlines()
            out += ["", f"{title} (first lines; whole file in logs.tar.gz):", "", "```", *lines[:22], "```"]
    return out


def _decoder_md(d: dict) -> list[str]:
    arts = [f"{k} {v.get('path')} (" + ("bound" if v.get("bound") else f"NOT used: {v.get('why', 'other target')}")
            + ")" for k, v in (d.get("artifacts") or {}).items()]
    out = [f"Model {d.get('model')} (float32 fingerprint {d.get('fingerprint_fp32')}), {len(d.get('prompts', []))} "
           f"prompts, {d.get('max_new_tokens')} new tokens, greedy. Artifacts: " + "; ".join(arts)]
    for dtype, part in (d.get("dtypes") or {}).items():
        out += ["", f"**{dtype}**", "", "| method | batch | tokens/s | tokens/step | x plain | equal to generate | "
                "max margin at a divergence |", "|---|---:|---:|---:|---:|---:|---:|"]
        for method, rows in part["bench"].items():
            for b, row in rows.items():
                eq = part["equality"].get(method, {}).get(b)
                equal = "-" if eq is None else f"{eq['equal']}/{eq['total']}"
                margin = "-" if eq is None else _fmt(eq["max_divergence_margin"], ".4f")
                out.append(f"| {method} | {b.removeprefix('batch')} | {row['tokens_per_s']:.1f} | "
                           f"{_fmt(row.get('tokens_per_step'), '.2f')} | {_fmt(row.get('speedup_vs_plain'), '.2f')} | "
                           f"{equal} | {margin} |")
    law = d.get("law")
    if law:
        out += ["", f"Decoder law on {law['device']} (per-test alpha {law['per_test_alpha']:.2e}; "
                    f"{'PASSED' if law.get('passed') else 'NOT passed'}):", "",
                "| case | trials x prompts | accepted/step | p (tokens 1-3 / 1-4 / 1-5 / 3-5) | rejected |",
                "|---|---:|---:|---|---:|"]
        for c in law["cases"]:
            out.append(f"| {c['case']} | {c['trials']} x {c['prompts']} | {c['accepted_per_step']} | "
                       f"{' / '.join(f'{p:.2g}' for p in c['p_values'])} | {c['rejected']} |")
    if d.get("errors"):
        out += ["", "Errors: " + "; ".join(d["errors"])]
    return out


def _train_md(t: dict, out_dir: Path) -> list[str]:
    s, g = t["stream"], t.get("data", {})
    out = [f"Target {t['target']} on {t['device']} ({t['target_dtype']} forwards). Data: {json.dumps(g)}.", "",
           f"Stream: {s['token_passes']:,} token passes ({s['unique_train_tokens']:,} unique tokens in "
           f"{s['train_sequences']:,} sequences, {s['epochs']} epochs), {s['steps']} of {s['planned_steps']} planned "
           f"steps, {s['seconds']} s ({s['tokens_per_second']:,.0f} tokens/s; target forwards "
           f"{s['target_forward_seconds']} s), stopped: {s['stopped']}. Goal >= 10M tokens: "
           f"{'met' if s['token_passes'] >= 10_000_000 else 'NOT met'}. Held out: {s['heldout_sequences']} sequences, "
           f"{s['heldout_tokens']:,} tokens. Stage seconds: {t.get('seconds')}."]
    for name in ("eagle3", "medusa"):
        r = t.get(name)
        if r:
            b, a = r["heldout_before"], r["heldout"]
            extra = f", greedy chain {b.get('chain_accepted')} -> {a.get('chain_accepted')}" if name == "eagle3" else ""
            out.append(f"- {name}: held-out CE {b['ce']} -> {a['ce']}; top-1 {b['top1']} -> {a['top1']}{extra}; "
                       f"train loss (last 20) {r['train_loss_last']}")
    for folder in sorted(p for p in out_dir.iterdir() if p.is_dir()):
        w = folder / "weights.safetensors"
        if w.is_file():
            size = w.stat().st_size
            out.append(f"- artifact {folder.name}/: weights {size / 1e6:.2f} MB "
                       f"({'within' if size <= MAX_FILE_BYTES else 'OVER'} the 16 MB per file)")
    return out


def write(state: Path, out_dir: Path) -> Path:
    res = state / "results"
    steps = _steps(state)
    envs = _load(res / "env.json") or {}
    verify, decoder, train = (_load(res / f"{n}.json") for n in ("verify", "decoder", "train"))
    tests = _pytest_line(next(iter(sorted((state / "logs").rglob("cuda_tests.log"))), Path("/nonexistent")))
    first = next(iter(envs.values()), {})
    lines = ["# GPU agenda results", "",
             f"{first.get('date_utc')}; machine: {first.get('nvidia_smi') or first.get('device')}; python "
             f"{first.get('python')}, torch {first.get('torch')} (CUDA {first.get('cuda')}), transformers "
             f"{first.get('transformers')}, {first.get('nvcc')}; code: {json.dumps(first.get('lock'))}.", "",
             "Commands: " + "; ".join(sorted({f"`{e.get('command')}`" for e in envs.values() if e.get('command')})),
             "", "## Steps", "", "| call | step | rc | wall s | cap s | |", "|---:|---|---:|---:|---:|---|"]
    for s in steps:
        status = "timed out" if s["timed_out"] else ("ok" if s["rc"] == 0 else "FAILED")
        lines.append(f"| {s['call']} | {s['step']} | {s['rc']} | {s['seconds']} | {s['cap']} | {status} |")
    lines += ["", "## 1. Build and the CUDA-only tests", ""]
    lines += [f"pytest: {tests['summary']}" + ("; " + "; ".join(tests["failed"]) if tests["failed"] else "")
              if tests else "not run"]
    lines += ["", "## 2. The decoder on CUDA", ""] + (_decoder_md(decoder) if decoder else ["not run"])
    lines += ["", "## 3. The verify op on decode-tree shapes", ""] + (_verify_md(verify, state) if verify
                                                                     else ["not run"])
    lines += ["", "## 4. Trained proposers (online features)", ""] + (_train_md(train, out_dir) if train else
                                                                       ["not run"])
    lines += ["", "Logs of every step: logs.tar.gz; every figure: results.json."]
    (out_dir / "summary.md").write_text("\n".join(lines) + "\n")
    (out_dir / "results.json").write_text(json.dumps({"env": envs, "steps": steps, "cuda_tests": tests,
                                                      "verify": verify, "decoder": decoder, "train": train}, indent=1))
    return out_dir / "summary.md"


def check_out(out_dir: Path) -> list[str]:
    """Problems with ``out_dir`` against what comes back from the machine."""
    files = [p for p in out_dir.rglob("*") if p.is_file()]
    problems = [f"{len(files)} files, at most {MAX_FILES} come back"] if len(files) > MAX_FILES else []
    for p in files:
        rel = p.relative_to(out_dir)
        if len(rel.parts) - 1 > MAX_DEPTH:
            problems.append(f"{rel}: deeper than {MAX_DEPTH} folders")
        if p.stat().st_size > MAX_FILE_BYTES:
            problems.append(f"{rel}: {p.stat().st_size} bytes > 16 MiB")
        if not re.fullmatch(r"[A-Za-z0-9._/-]+", str(rel)):
            problems.append(f"{rel}: a name with characters other than letters, digits, '.', '_', '-'")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    for a, t in (("--state", Path), ("--call", int), ("--name", str), ("--rc", int), ("--seconds", float),
                 ("--cap", int), ("--command", str)):
        r.add_argument(a, type=t, required=True)
    e = sub.add_parser("env")
    e.add_argument("--state", type=Path, required=True)
    e.add_argument("--call", type=int, required=True)
    e.add_argument("--command", default=None)
    w = sub.add_parser("write")
    w.add_argument("--state", type=Path, required=True)
    w.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("check-out")
    c.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "record":
        record(args.state, args.call, args.name, args.rc, args.seconds, args.cap, args.command)
    elif args.cmd == "env":
        facts = env(args.state, args.call)
        if args.command:
            all_env = _load(args.state / "results" / "env.json")
            all_env[f"call{args.call}"]["command"] = args.command
            (args.state / "results" / "env.json").write_text(json.dumps(all_env, indent=1))
        print(json.dumps(facts))
    elif args.cmd == "write":
        print(write(args.state, args.out))
    else:
        problems = check_out(args.out)
        print("\n".join(problems) or f"{args.out}: fits what comes back (<= {MAX_FILES} files, 16 MiB, 2 folders)")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
