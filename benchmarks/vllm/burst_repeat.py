"""How much of a plan's big-batch step cost is one burst's noise and how much the server's: the
question behind the interactive answer moving between plans (docs/vllm-plan-runs.md, "The
interactive pool planned from the command line").

A plan measures each candidate's steps at the batch sizes an overload runs with one burst on one
server. Here, for each configuration, ``--servers`` fresh servers, each warmed as the plan warms
it (one measurement of the pool) and then sent ``--bursts`` bursts of ``--burst`` requests at once.
Per burst: the mean decode step (seconds), tokens per row and output tokens/s at ``--rows`` running
requests or more. Per configuration: the spread of bursts on one server, of the servers' means, and
each server's tokens/s against off's on the server started beside it (the ratio the plan's overload
rule reads, through the simulator): a drafter whose gate drafts at full batch on one server and not
on the next shows here.

    .venv-vllm/bin/python -m benchmarks.vllm.burst_repeat --configs off,custom_class:4 --servers 2 --bursts 3

``--recorded PLAN_DIR`` reads a plan's own recorded bursts instead, with no server (:func:`recorded`):
per candidate and burst (off's drift check's too) the mean full-batch step, tokens per row and output
tokens/s, against off's mean on the same plan.

    python -m benchmarks.vllm.burst_repeat --recorded benchmarks/results/vllm-cli-plan-inter2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.vllm import plan_goodput as pg
from benchmarks.vllm.plan_goodput import ROOT


def summary(run, rows: int, gap: float) -> dict | None:
    """A burst's decode steps at ``rows`` running requests or more: their count ``steps``, mean ``step``
    (s), mean ``tokens_per_row`` and output ``tok_s`` over them; None when it ran no such step."""
    from specdec.plan.vllm.calibrate import decode_steps

    got = [(size, sec, tok) for size, steps in decode_steps(run, gap).items() if size >= rows for sec, tok in steps]
    if not got:
        return None
    return {"steps": len(got), "step": statistics.fmean(sec for _, sec, _ in got),
            "tokens_per_row": statistics.fmean(tok for *_, tok in got),
            "tok_s": sum(size * tok for size, _, tok in got) / sum(sec for _, sec, _ in got)}


def recorded(plan_dir: Path, rows: int, gap: float) -> list[dict]:
    """One row per pool, candidate and recorded burst of a plan (``plan.json`` and ``runs/``): its
    :func:`summary` and ``vs_off``: its tok/s over the mean of off's bursts' on the pool; off's drift
    check's bursts (:mod:`specdec.plan.vllm.drift`), where recorded, as ``off, again``. ValueError for a
    folder with no plan.json or no burst of off."""
    from specdec.plan.vllm.measure import PoolRun
    from specdec.plan.vllm.run_plan import burst_files, burst_kind, drift_kind

    try:
        pools = json.loads((plan_dir / "plan.json").read_text())["pools"]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{plan_dir}: not a plan folder ({exc})") from None
    out = []
    for pool, o in pools.items():
        here = []
        kinds = [(name, name, burst_kind) for name in o["candidates"]] + [("off", "off, again", drift_kind)]
        for name, label, kind in kinds:
            for i, path in enumerate(burst_files(plan_dir, name, pool, kind)):
                got = summary(PoolRun.from_dict(json.loads(path.read_text())), rows, gap)
                if got:
                    here.append({"pool": pool, "candidate": label, "burst": i + 1, **got})
        off = [r["tok_s"] for r in here if r["candidate"] == "off"]
        if not off:
            raise ValueError(f"{plan_dir}: pool {pool!r} has no burst of off with a step at >= {rows} rows")
        out += [{**r, "vs_off": r["tok_s"] / statistics.fmean(off)} for r in here]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recorded", type=Path, default=None, metavar="PLAN_DIR",
                    help="read a plan's recorded bursts instead of serving (no server)")
    ap.add_argument("--configs", default="off,custom_class:4", help="METHOD[:K] list; off first")
    ap.add_argument("--pool", default="interactive", choices=("interactive", "bulk"))
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--bursts", type=int, default=3)
    ap.add_argument("--burst", type=int, default=16, help="requests at once (the plan sends max_num_seqs)")
    ap.add_argument("--rows", type=int, default=12, help="the smallest batch size counted")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vllm-burst-repeat")
    args = ap.parse_args(argv)
    if args.recorded is not None:
        from specdec.plan.vllm.calibrate import DEFAULT_GAP

        try:
            rows = recorded(args.recorded, args.rows, DEFAULT_GAP)
        except ValueError as exc:
            ap.error(str(exc))
        print(f"| pool | candidate | burst | steps at >= {args.rows} rows | mean step (ms) | tokens per row | "
              "output tokens/s | / off's |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['pool']} | {r['candidate']} | {r['burst']} | {r['steps']} | {r['step'] * 1e3:.1f} | "
                  f"{r['tokens_per_row']:.2f} | {r['tok_s']:.1f} | {r['vs_off']:.2f} |")
        return
    # plan_goodput's pools, objectives and server settings; the warm-up ramps as the recent plans' did
    g = pg.main_parser().parse_args(["--rates-interactive", "0.316,1"])
    if min(args.servers, args.bursts) < 1 or args.burst < args.rows:
        ap.error("--servers and --bursts must be >= 1 and --burst at least --rows")

    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir
    from specdec.plan.vllm.calibrate import DEFAULT_GAP
    from specdec.plan.vllm.candidates import parse_candidates
    from specdec.plan.vllm.launcher import ServeCommand
    from specdec.plan.vllm.measure import measure_burst, measure_pool
    from specdec.plan.vllm.pool_spec import parse_pool_file
    from specdec.plan.vllm.run_plan import ServerSource

    cands = parse_candidates(args.configs, {})
    if cands[0].method != "off":
        ap.error("--configs must start with off: each server is compared with off's beside it")
    pools = parse_pool_file(pg.pool_text(g, g.prompts.resolve()), "burst_repeat pools")
    pool, _ = pg.split(pools[args.pool], g.plan_requests if args.pool == "interactive" else g.plan_requests_bulk)
    command = ServeCommand(pg.serve_command(g, vllm_ready(cache_dir() / DEFAULT_NAME)))
    args.out.mkdir(parents=True, exist_ok=True)
    source = ServerSource(args.out / "logs", command=command, env=pg.server_env(), start_timeout=900)
    nan = {"steps": 0, "step": float("nan"), "tokens_per_row": float("nan"), "tok_s": float("nan")}
    bursts: dict[str, list[list[dict]]] = {c.name: [] for c in cands}
    for s in range(args.servers):  # off's server and each other's in turn, so a pair shares the machine's hour
        for cand in cands:
            with source.server(cand, tag=str(s)) as server:
                measure_pool(server, cand.name, pool, seed=s, timeout=300.0, expect_k=cand.k)
                per = []
                for b in range(args.bursts):
                    run = measure_burst(server, cand.name, pool, args.burst, timeout=300.0)
                    per.append(summary(run, args.rows, DEFAULT_GAP) or nan)
                    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {cand.name} server {s} "
                          f"burst {b}: {per[-1]['steps']} steps at >= {args.rows} rows, mean "
                          f"{per[-1]['step'] * 1e3:.1f} ms, {per[-1]['tokens_per_row']:.2f} tokens a row", flush=True)
                bursts[cand.name].append(per)
    (args.out / "burst_repeat.json").write_text(json.dumps(bursts, indent=1))
    print(f"\nDecode steps at >= {args.rows} running requests, bursts of {args.burst}, pool {args.pool}:\n")
    print("| configuration | server | mean step per burst (ms) | within the server (max/min) | tokens per row | "
          "output tok/s / off's on that server |")
    print("|---|---:|---|---:|---:|---:|")
    mean = lambda per, key: statistics.fmean(b[key] for b in per)  # noqa: E731
    off = [mean(per, "tok_s") for per in bursts[cands[0].name]]
    for name, servers in bursts.items():
        for s, per in enumerate(servers):
            steps = [b["step"] for b in per]
            print(f"| {name} | {s} | {', '.join(f'{x * 1e3:.1f}' for x in steps)} | {max(steps) / min(steps):.3f} | "
                  f"{mean(per, 'tokens_per_row'):.2f} | {mean(per, 'tok_s') / off[s]:.3f} |")
    for name, servers in bursts.items():
        m = [mean(per, "step") for per in servers]
        print(f"\n{name}: servers' mean steps {', '.join(f'{x * 1e3:.1f}' for x in m)} ms "
              f"(max/min {max(m) / min(m):.3f})")


if __name__ == "__main__":
    main()
