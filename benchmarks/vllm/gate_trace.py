"""What the cost gate's step fit sees in vLLM, and how well it predicts the next step: traces, replayed.

The cost gate (:class:`~specdec.control.cost_gate.CostGate`) decides each step from a fit of the
engine's step times. A plan reads only what comes out (tokens per row, tokens/s); this records what
goes in. :class:`TracedDrafter` is the cost-gated drafter that also writes each observation the gate
gets (per-row drafted and accepted tokens, the budget, the step's seconds, whether it is fitted, its
prefill rows) as one JSON line to the file named by ``SPECDEC_GATE_TRACE``. Collecting runs
``--servers`` fresh servers with it, each measured as a plan measures a candidate (the pool, then
``--bursts`` bursts of 16). Replaying feeds a trace's observations, in order, to the ``CostGate`` of
the checkout on ``PYTHONPATH`` and reports, per trace:

* the fit's error one step ahead: ``|predicted - measured| / measured`` for every fitted decode-only
  step, predicted before the step is observed (median, mean), and its mean in milliseconds;
* what a drafting step costs against the plain one (2 drafted tokens a row) at 1, 4 and 16 rows, by
  the fit at the trace's end and by the **reference**: one relative-error fit of all the trace's
  fitted decode-only steps, with no forgetting (what the gate would believe with all the evidence);
* the share of steps of 12 rows or more at which the replayed fit (with the acceptance it learned
  from the trace) would choose a budget above 0.

The replayed gate's own decisions are not replayed (they are the recorded ones): this measures the
fit, not the policy. Two checkouts replay the same traces side by side: run it twice, each with its
own ``PYTHONPATH``.

    .venv-vllm/bin/python -m benchmarks.vllm.gate_trace --servers 3
    .venv/bin/python -m benchmarks.vllm.gate_trace --replay benchmarks/results/vllm-gate-trace
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from specdec.integrations.vllm.drafter import CostGatedSuffixDrafter
from specdec.plan.vllm.burst_noise import full_rows

TRACE_ENV = "SPECDEC_GATE_TRACE"
DRAFTER = "benchmarks.vllm.gate_trace.TracedDrafter"
RATIO_ROWS = (1, 4, 16)
FULL_ROWS = full_rows(16)  # a full batch of plan_goodput's max_num_seqs, as a plan counts one


class TracedDrafter(CostGatedSuffixDrafter):
    """The cost-gated suffix drafter, with each of its gate's observations written to ``$SPECDEC_GATE_TRACE``."""

    def __init__(self, vllm_config):
        super().__init__(vllm_config)
        self.trace_path = os.environ.get(TRACE_ENV)
        if not self.trace_path:
            raise ValueError(f"TracedDrafter needs {TRACE_ENV}: the file its gate's observations go to")
        self.gating.trace = self.write

    def write(self, outcome) -> None:
        """Append one observation (an :class:`~specdec.control.interface.Outcome`) as a JSON line."""
        line = {"drafted": outcome.drafted.tolist(), "accepted": outcome.accepted.tolist(),
                "budget": int(outcome.budget), "seconds": outcome.seconds, "fit": bool(outcome.fit),
                "offered": None if outcome.offered is None else np.asarray(outcome.offered, bool).tolist(),
                "prefill": int(outcome.prefill)}
        with open(self.trace_path, "a") as f:
            f.write(json.dumps(line) + "\n")


def load(path: Path) -> list[dict]:
    """A trace's observations, in order (``.gz``: gzipped)."""
    path = Path(path)
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _outcome(o: dict):
    from specdec.control.interface import Outcome

    return Outcome.of(o["drafted"], o["accepted"], budget=o["budget"], seconds=o["seconds"], fit=o["fit"],
                      offered=o["offered"], prefill=o["prefill"])


def _decode_step(o: dict) -> bool:
    return bool(o["fit"] and o["seconds"] and o["seconds"] > 0 and o["prefill"] == 0)


def _x(o: dict) -> np.ndarray:
    """``[a, b, d, c]`` terms of a decode-only step."""
    total = float(sum(o["drafted"]))
    return np.array([1.0, len(o["drafted"]), float(total > 0), total])


def reference(trace: list[dict]) -> np.ndarray:
    """``[a, b, d, c]`` (>= 0) fitted once, in relative error, to every fitted decode-only step."""
    from specdec.estimate.fit import nonnegative_lstsq

    steps = [o for o in trace if _decode_step(o)]
    y = np.array([o["seconds"] for o in steps])
    return nonnegative_lstsq(np.stack([_x(o) for o in steps]), y, 1.0 / y ** 2)


def drafting_ratio(theta: np.ndarray, rows: int, per_row: float = 2.0) -> float:
    """A step's extra seconds for ``per_row`` drafted tokens a row, over the plain step, under ``[a, b, d, c]``."""
    a, b, d, c = theta
    return float((d + c * rows * per_row) / (a + b * rows))


def replay(trace: list[dict], k: int = 4) -> dict:
    """The checkout's ``CostGate(k)`` fed ``trace`` in order: its one-step-ahead errors and end ratios
    against :func:`reference`'s (module docstring)."""
    from specdec.control.cost_gate import CostGate

    gate = CostGate(k)
    rel, ms, full = [], [], []
    for o in trace:
        theta = gate.coefficients()
        if theta is not None and len(o["drafted"]) >= FULL_ROWS:
            full.append(int(np.argmax(gate.rates(len(o["drafted"])))) > 0)
        if theta is not None and _decode_step(o):
            err = abs(float(_x(o) @ theta) - o["seconds"])
            rel.append(err / o["seconds"])
            ms.append(err * 1e3)
        gate.observe(_outcome(o))
    end, ref = gate.coefficients(), reference(trace)
    return {"steps": len(trace), "predicted": len(rel), "median_rel": statistics.median(rel),
            "mean_rel": statistics.fmean(rel), "mean_ms": statistics.fmean(ms), "end": end.tolist(),
            "drafts_full": statistics.fmean(full) if full else float("nan"),
            "reference": ref.tolist(), "ratio": [drafting_ratio(end, r) for r in RATIO_ROWS],
            "ratio_reference": [drafting_ratio(ref, r) for r in RATIO_ROWS]}


def collect(out: Path, servers: int, bursts: int, pool_name: str = "interactive") -> list[Path]:
    """``servers`` fresh servers running :class:`TracedDrafter`, each measured on ``pool_name`` (plan_goodput's
    pools) and sent ``bursts`` bursts of 16 (as a plan measures a candidate); one trace file per server."""
    from benchmarks.vllm import plan_goodput as pg
    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir
    from specdec.plan.vllm.launcher import ServeCommand, Server
    from specdec.plan.vllm.measure import measure_burst, measure_pool
    from specdec.plan.vllm.pool_spec import parse_pool_file

    g = pg.main_parser().parse_args(["--rates-interactive", "0.316,1"])
    pools = parse_pool_file(pg.pool_text(g, g.prompts.resolve()), "gate_trace pools")
    pool, _ = pg.split(pools[pool_name], g.plan_requests if pool_name == "interactive" else g.plan_requests_bulk)
    command = ServeCommand(pg.serve_command(g, vllm_ready(cache_dir() / DEFAULT_NAME)))
    config = {"method": "custom_class", "num_speculative_tokens": 4, "model": DRAFTER}
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(servers):
        path = out / f"trace{s}.jsonl"
        path.unlink(missing_ok=True)
        server = Server.launch("traced", command, config, out / "logs" / f"server-{s}.log",
                               env={**pg.server_env(), TRACE_ENV: str(path)})
        try:
            server.wait_ready(900)
            measure_pool(server, "traced", pool, seed=s, timeout=300.0, expect_k=4)
            for _ in range(bursts):
                measure_burst(server, "traced", pool, 16, timeout=300.0)
        finally:
            server.stop()
        print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] server {s}: "
              f"{len(load(path))} observations in {path}", flush=True)
        paths.append(path)
    return paths


def main(argv=None):
    from benchmarks.vllm.plan_goodput import ROOT

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replay", type=Path, default=None, metavar="DIR", help="replay DIR's trace*.jsonl (no server)")
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--bursts", type=int, default=2)
    ap.add_argument("--pool", default="interactive", choices=("interactive", "bulk"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "vllm-gate-trace")
    args = ap.parse_args(argv)
    if args.replay is None and min(args.servers, args.bursts) < 1:
        ap.error("--servers and --bursts must be >= 1")
    paths = (sorted(args.replay.glob("trace*.jsonl")) if args.replay is not None
             else collect(args.out, args.servers, args.bursts, args.pool))
    if not paths:
        ap.error(f"{args.replay}: no trace*.jsonl there")
    rows = ", ".join(str(r) for r in RATIO_ROWS)
    print(f"| trace | steps | predicted | one step ahead: median, mean error | mean (ms) | drafting / plain at "
          f"{rows} rows: end of trace | reference | the fit drafts at >= {FULL_ROWS} rows |")
    print("|---|---:|---:|---|---:|---|---|---:|")
    for path in paths:
        r = replay(load(path))
        fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        print(f"| {path.name} | {r['steps']} | {r['predicted']} | {r['median_rel']:.3f}, {r['mean_rel']:.3f} | "
              f"{r['mean_ms']:.1f} | {fmt(r['ratio'])} | {fmt(r['ratio_reference'])} | {r['drafts_full']:.0%} |")


if __name__ == "__main__":
    main()
