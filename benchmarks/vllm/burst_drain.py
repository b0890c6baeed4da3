"""How much of a short load-test run is its drain: the question behind a throughput score read off a burst.

A run of ``plan_goodput.py`` or ``schedule_tax.py`` sends a burst of requests on Poisson arrivals and
scores good output tokens per second of its makespan (first request sent to last token). Below
capacity a steady state gives every configuration the same tokens/s (the arrival rate sets it); a
burst of a dozen requests instead ends with a drain, the last arrivals decoding after the arrivals
stop, whose length is one request's latency. Where the drain is a large share of the makespan, the
"throughput" score rewards a lower TPOT, which the steady state does not.

For every recorded run (``<out>/runs/<config>__<rate>__<round>.json``) this prints the drain's share
of the makespan, and each configuration against ``--planned`` round by round: the run's score ratio,
and the ratio of tokens/s within the arrival window (first to last request sent), which leaves the
drain out.

    python -m benchmarks.vllm.burst_drain benchmarks/results/vllm-knee-bulk-r3a --planned off
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path


def burst(run: dict) -> dict:
    """One recorded run (``PoolRun.to_dict()``): ``span`` (first to last request sent, s), ``drain`` (last
    sent to last token, s), ``share`` (drain / makespan), ``score`` (tokens / makespan) and ``window``
    (tokens out by the last send / span); failed requests are left out."""
    streams = [s for s in run["streams"] if s["error"] is None and s["chunk_times"]]
    if len(streams) < 2:
        raise ValueError(f"{run.get('candidate')}: a burst needs two finished requests, got {len(streams)}")
    first, last = min(s["sent"] for s in streams), max(s["sent"] for s in streams)
    end = max(s["chunk_times"][-1] for s in streams)
    tokens = sum(sum(s["chunk_tokens"]) for s in streams)
    by_last = sum(k for s in streams for t, k in zip(s["chunk_times"], s["chunk_tokens"]) if t <= last)
    span = last - first
    return {"span": span, "drain": end - last, "share": (end - last) / (end - first), "score": tokens / (end - first),
            "window": by_last / span if span > 0 else math.nan}


def load(folder: Path) -> dict:
    """``{(rate, round): {config: burst}}`` from a benchmark folder's ``runs/``."""
    out: dict = defaultdict(dict)
    for path in sorted((folder / "runs").glob("*__*__*.json")):
        config, rate, rnd = path.stem.split("__")
        out[(float(rate), int(rnd))][config] = burst(json.loads(path.read_text()))
    if not out:
        raise SystemExit(f"no recorded runs in {folder / 'runs'}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", type=Path, nargs="+", help="plan_goodput.py or schedule_tax.py output folders")
    ap.add_argument("--planned", default="off", help="the configuration every other is divided into")
    args = ap.parse_args(argv)
    rounds: dict = defaultdict(dict)
    for i, folder in enumerate(args.folders):
        for (rate, rnd), configs in load(folder).items():
            rounds[(rate, i, rnd)] = configs
    print("| load (req/s) | configuration | drain / makespan, median | planned / this: score, each round "
          "| planned / this: arrival-window tokens/s, each round |")
    print("|---:|---|---:|---|---|")
    for rate in sorted({r for r, _, _ in rounds}):
        here = [c for (r, _, _), c in sorted(rounds.items()) if r == rate]
        for name in sorted({n for c in here for n in c}):
            shares = [c[name]["share"] for c in here if name in c]
            pairs = [] if name == args.planned else [(c[args.planned], c[name]) for c in here
                                                     if name in c and args.planned in c]
            score, window = (", ".join(f"{p[k] / o[k]:.3f}" for p, o in pairs) for k in ("score", "window"))
            print(f"| {rate:g} | {name} | {statistics.median(shares):.0%} | {score} | {window} |")


if __name__ == "__main__":
    main()
