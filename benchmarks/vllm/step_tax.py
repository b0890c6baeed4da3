"""Where the ``custom_class`` tax goes: vLLM's decode step time under four engine configurations, one run.

A ``custom_class`` drafter that never drafts (``specdec-never``) loses goodput to ``off`` near the
knee (docs/performance.md). This script takes that loss apart, each part a ratio of two
configurations measured in the same run:

* ``off`` -> ``off-sync``: async scheduling, which vLLM turns off for every ``custom_class`` drafter
  (and for its own CPU-side ``ngram`` and ``suffix`` methods). On vLLM's CPU build the platform
  turns it off for every configuration (vllm/platforms/cpu.py, "async scheduling is not required
  on CPU"), ``off`` included, so there this pair is two runs of one configuration: the noise floor;
* ``off-sync`` -> ``null-class``: the rest of vLLM's speculative path with a drafter that returns
  at once (benchmarks/vllm/null_drafter.py): lookahead slots, speculative metadata, the call;
* ``null-class`` -> ``specdec-never``: specdec's own per-step work with its gate off (row
  matching and commits, so drafting can resume).

Per round every policy gets a fresh server (serve_bench.start_server), in an order rotated from
round to round so that drift on the machine falls on all of them. After a warm-up, bursts of B
requests are sent at once (B in ``--bursts``, each ``--repeats`` times); every gap between two
chunks of a request while all B requests decode is one engine step of B rows
(``together_gaps``). A round's figure per policy and B is the median of its gaps; the ratios are
taken within a round and their median over rounds is reported with the range. Whether each
configuration runs with async scheduling is read from vLLM's resolved config
(``EngineArgs.create_engine_config``, the server's arguments), not assumed.

Output: step_tax.md/.json in ``--out``.

Run in .venv-vllm:  .venv-vllm/bin/python -m benchmarks.vllm.step_tax --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from benchmarks.common.paths import ROOT
from benchmarks.vllm import serve_bench
from benchmarks.vllm.serve_load import drive

POLICIES = ("off", "off-sync", "null-class", "specdec-never")
# (name, numerator, denominator): each step of the decomposition, in the order the tax builds up
PARTS = (("--no-async-scheduling (off-sync / off)", "off-sync", "off"),
         ("vLLM's speculative path (null-class / off-sync)", "null-class", "off-sync"),
         ("specdec's bookkeeping (specdec-never / null-class)", "specdec-never", "null-class"),
         ("the custom_class tax in all (specdec-never / off)", "specdec-never", "off"))


def resolved_async_scheduling(policy: str, args) -> bool:
    """Whether vLLM's resolved config for this policy's server runs async scheduling (the server log
    says so only when a speculative method turns it off, not when the platform does)."""
    from vllm.engine.arg_utils import EngineArgs

    spec = serve_bench.speculative_config(policy, args.k)
    engine = EngineArgs(model=str(args.model), dtype="float32", max_model_len=2048, enforce_eager=True,
                        max_num_seqs=args.max_num_seqs, speculative_config=spec,
                        async_scheduling=False if policy == "off-sync" else None)
    return bool(engine.create_engine_config().scheduler_config.async_scheduling)


async def measure(policy: str, args, port: int, log: Path) -> dict:
    """One fresh server: step gaps (seconds) per burst size, and whether async scheduling was on."""
    from specdec.plan.vllm.engine_trace import together_gaps

    proc = serve_bench.start_server(args.model, policy, args, port, log)
    gaps: dict[int, list[float]] = {}
    try:
        await serve_bench.wait_ready(port, proc, args.start_timeout)
        await drive(port, args.warmup_prompts, rate=0.0, max_tokens=8, timeout=args.request_timeout, seed=0)
        for rep in range(args.repeats):
            for i, b in enumerate(args.bursts):
                group = [dict(args.prompts[(rep * 5 + i * 7 + j) % len(args.prompts)], index=j) for j in range(b)]
                res = await drive(port, group, rate=0.0, max_tokens=args.max_tokens, timeout=args.request_timeout,
                                  seed=0)
                bad = [r["error"] for r in res if r["error"]]
                if bad:
                    raise RuntimeError(f"{policy}: a burst of {b} failed: {bad[0]}")
                gaps.setdefault(b, []).extend(together_gaps([r["chunk_times"] for r in res]))
    finally:
        serve_bench.stop_server(proc)
    return {"policy": policy, "gaps": {str(b): g for b, g in gaps.items()}}


def summarize(rounds: list[dict[str, dict]], bursts: list[int]) -> dict:
    """Median step ms per policy and B (over rounds), and each part's within-round ratio (median, range)."""
    step = {p: {b: [statistics.median(r[p]["gaps"][str(b)]) * 1e3 for r in rounds] for b in bursts}
            for p in rounds[0]}
    parts = {}
    for name, num, den in PARTS:
        if num in step and den in step:
            parts[name] = {b: [n / d for n, d in zip(step[num][b], step[den][b])] for b in bursts}
    return {"step_ms": step, "parts": parts}


def table(summary: dict, async_by_policy: dict[str, bool], bursts: list[int]) -> str:
    def cell(values: list[float], fmt: str) -> str:
        med = statistics.median(values)
        return f"{med:{fmt}}" if len(values) == 1 else f"{med:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

    cols = " | ".join(f"B = {b}" for b in bursts)
    rule = "|---|---|" + "---:|" * len(bursts)
    lines = [f"| policy: decode step ms (median over rounds; range) | async scheduling (resolved) | {cols} |", rule]
    for p, by_b in summary["step_ms"].items():
        lines.append(f"| {p} | {'on' if async_by_policy[p] else 'off'} | "
                     + " | ".join(cell(by_b[b], ".1f") for b in bursts) + " |")
    lines += ["", f"| part (ratio of step times, within a round) | {cols} |", "|---|" + "---:|" * len(bursts)]
    for name, by_b in summary["parts"].items():
        lines.append(f"| {name} | " + " | ".join(cell(by_b[b], ".3f") + "x" for b in bursts) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default=",".join(POLICIES), help="serve_bench policy names")
    ap.add_argument("--rounds", type=int, default=3, help="fresh servers per policy, in a rotated order")
    ap.add_argument("--bursts", default="1,4,16", help="batch sizes: requests sent at once")
    ap.add_argument("--repeats", type=int, default=2, help="bursts of each size per server")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens of the custom_class policies")
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--table-from", type=Path, default=None, help="re-render a step_tax.json and exit")
    serve_bench.add_run_args(ap, port=18451, out=ROOT / "benchmarks" / "results" / "vllm-step-tax")
    args = ap.parse_args(argv)
    if args.table_from:
        saved = json.loads(args.table_from.read_text())
        print(table(summarize(saved["rounds"], saved["bursts"]), saved["async_scheduling"], saved["bursts"]))
        return
    policies = [p for p in args.policies.split(",") if p]
    for p in policies:
        serve_bench.speculative_config(p, args.k)  # unknown names fail before any server starts
    try:
        args.bursts = [int(x) for x in args.bursts.split(",")]
    except ValueError as e:
        ap.error(f"--bursts is comma-separated integers: {e}")
    if args.rounds < 1 or args.repeats < 1 or args.max_tokens < 8 or not policies:
        ap.error("need --rounds >= 1, --repeats >= 1, --max-tokens >= 8 and at least one policy")
    if any(not 1 <= b <= args.max_num_seqs for b in args.bursts):
        ap.error(f"every burst must lie in [1, --max-num-seqs={args.max_num_seqs}], got {args.bursts}")
    args.out.mkdir(parents=True, exist_ok=True)
    from transformers import AutoTokenizer

    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir
    from specdec.prompts import encode_first_turn, read_prompt_records

    args.model = vllm_ready(cache_dir() / DEFAULT_NAME)
    tok = AutoTokenizer.from_pretrained(args.model)
    records = read_prompt_records(str(ROOT / "specdec" / "data" / "prompts_dev_sample.jsonl"))
    prompts = [{"index": i, "prompt_token_ids": encode_first_turn(tok, r)} for i, r in enumerate(records)]
    args.prompts, args.warmup_prompts = prompts[:-2], prompts[-2:]
    args.gate_off_above, args.log_every = 0, 0  # serve_bench.start_server reads them
    async_by_policy = {p: resolved_async_scheduling(p, args) for p in policies}
    print("async scheduling as vLLM resolves it: " + ", ".join(f"{p} {v}" for p, v in async_by_policy.items()))
    rounds = []
    for r in range(args.rounds):
        order = policies[r % len(policies):] + policies[: r % len(policies)]
        got = {}
        for p in order:
            t0 = time.monotonic()
            got[p] = asyncio.run(measure(p, args, args.port, args.out / f"server-{p}-round{r}.log"))
            med = {b: statistics.median(g) * 1e3 for b, g in got[p]["gaps"].items()}
            print(f"round {r} {p:14s} step ms "
                  + " ".join(f"B={b}: {m:.1f}" for b, m in med.items()) + f" ({time.monotonic() - t0:.0f} s)",
                  flush=True)
        rounds.append({p: got[p] for p in policies})
    md = table(summarize(rounds, args.bursts), async_by_policy, args.bursts)
    print(md)
    (args.out / "step_tax.md").write_text(md + "\n")
    (args.out / "step_tax.json").write_text(json.dumps({"bursts": args.bursts, "async_scheduling": async_by_policy,
                                                            "rounds": rounds}, indent=1))
    print(f"wrote {args.out}/step_tax.md, .json")


if __name__ == "__main__":
    main()
