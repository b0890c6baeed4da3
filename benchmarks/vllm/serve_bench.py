"""Goodput under load in vLLM: SmolLM2-135M behind vLLM's OpenAI server on loopback, up to nine policies.

For each policy and each rate a fresh ``vllm serve``-equivalent server
(``vllm.entrypoints.openai.api_server``) starts on 127.0.0.1 from specdec's converted SmolLM2
folder (made vLLM-loadable by ``specdec.integrations.vllm.checkpoint.vllm_ready``): one run per
load level, so no cache (vLLM's prefix cache, a suffix method's global cache of responses) carries
the same prompts' answers from one level into the next -- with one server per policy, ArcticInference's
global cache had memorised the previous level's answers and accepted 96% of its drafts. A bounded
load generator sends the dev prompts as streamed greedy completions with Poisson arrivals at the
rate, requests and arrival times identical across policies (seeded). Policies:

* ``off``: no speculation;
* ``off-sync``: no speculation and async scheduling off (``--no-async-scheduling``): the engine
  every ``custom_class`` drafter gets, without a drafter;
* ``ngram``: vLLM's ``method="ngram"`` (prompt_lookup 1..4, k tokens);
* ``suffix``: vLLM's ``method="suffix"`` (ArcticInference), when ``.arctic/site`` holds its
  module (scripts/build_arctic_suffix.sh) -- skipped with the reason otherwise;
* ``specdec``: specdec's SuffixDrafter, always on;
* ``specdec-gated``: the same with the load gate (``--gate-off-above``);
* ``specdec-cost``: the same with the cost gate (``cost_gate``: the budget from this engine's own
  step times, fitted while serving; specdec/control/cost_gate.py);
* ``specdec-never``: the drafter loaded but never drafting (gate off above 0 requests): what
  ``custom_class`` itself costs the engine, the floor of any gate inside the drafter (on GPUs vLLM
  turns async scheduling off for it; on the CPU build it is off for every policy, and the cost is
  vLLM's speculative path: step_tax.py);
* ``null-class``: a ``custom_class`` drafter that returns at once (benchmarks/vllm/null_drafter.py):
  vLLM's side of the interface without specdec's bookkeeping.

Per policy and rate: goodput (requests meeting both the TTFT and the TPOT target, per second of
the run), throughput (output tokens/s), p50/p99 TTFT and TPOT, acceptance (vLLM's own
``vllm:spec_decode_*`` counters from /metrics, before and after the run: accepted per drafted
token, and the share of output tokens that were accepted drafts), and whether every
output equals the ``off`` policy's output for the same prompt. Results: JSON, a markdown table and
a PNG of goodput against rate in ``--out``.

Every loop is bounded: ``--requests`` per rate, a per-request timeout, a server start timeout; the
server is stopped (its process group) after each policy, also on error.

Run in .venv-vllm:  .venv-vllm/bin/python benchmarks/vllm/serve_bench.py --out benchmarks/results/vllm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import drive, percentile, scrape_spec_metrics  # noqa: E402  (beside this file)

POLICIES = ("off", "ngram", "suffix", "specdec", "specdec-gated", "specdec-cost", "specdec-never", "off-sync",
            "null-class")
DEFAULT_POLICIES = POLICIES[:7]  # the last two only take the custom_class tax apart (step_tax.py)
# the drafter's options per specdec policy (SPECDEC_VLLM_OPTIONS); gate_off_above comes from the command line
DRAFTER_OPTIONS = {"specdec": {}, "specdec-gated": {"gate_off_above": None}, "specdec-cost": {"cost_gate": True},
                   "specdec-never": {"gate_off_above": 0}}


def speculative_config(policy: str, k: int) -> dict | None:
    if policy in ("off", "off-sync"):
        return None
    if policy == "null-class":
        return {"method": "custom_class", "model": "null_drafter.NullDrafter", "num_speculative_tokens": k}
    if policy == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    if policy == "suffix":
        return {"method": "suffix", "num_speculative_tokens": k}
    if policy in DRAFTER_OPTIONS:
        return {"method": "custom_class", "model": "specdec.integrations.vllm.drafter.SuffixDrafter",
                "num_speculative_tokens": k}
    raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")


def write_logging_config(folder: Path) -> Path:
    """A logging dictConfig for the server: vLLM's and specdec's loggers to stdout (the server log)."""
    handler = {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stdout"}
    config = {"version": 1, "disable_existing_loggers": False,
              "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
              "handlers": {"stdout": handler},
              "loggers": {name: {"handlers": ["stdout"], "level": "INFO", "propagate": False}
                          for name in ("vllm", "specdec")}}
    path = folder / "logging.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def start_server(model: Path, policy: str, args, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ)
    options = {key: args.gate_off_above if value is None else value
               for key, value in DRAFTER_OPTIONS.get(policy, {}).items()}
    env["SPECDEC_VLLM_OPTIONS"] = json.dumps({**options, "log_every": args.log_every})
    # vLLM configures only its own loggers; this config adds the drafter's (gate decisions, step fit)
    env["VLLM_LOGGING_CONFIG_PATH"] = str(write_logging_config(log.parent))
    if policy == "suffix":
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / ".arctic" / "site"), env.get("PYTHONPATH", "")])
    if policy == "null-class":
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs",
           str(args.max_num_seqs), "--kv-cache-memory-bytes", str(1 << 30), "--gpu-memory-utilization", "0.3",
           "--enforce-eager", "--disable-uvicorn-access-log", "--seed", "0"]
    if policy == "off-sync":
        cmd.append("--no-async-scheduling")
    spec = speculative_config(policy, args.k)
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec)]
    out = open(log, "w")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


async def wait_ready(port: int, proc: subprocess.Popen, timeout: float) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with status {proc.returncode} before it was ready")
            try:
                async with s.get(f"http://127.0.0.1:{port}/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(1.0)
    raise TimeoutError(f"the server on port {port} was not ready after {timeout:.0f} s")


def summarize(policy: str, rate: float, results: list[dict], wall: float, spec: dict, args) -> dict:
    ok = [r for r in results if r["error"] is None]
    ttft = [r["ttft"] for r in ok]
    tpot = [r["tpot"] for r in ok if r["tpot"] is not None]
    good = [r for r in ok if r["ttft"] <= args.slo_ttft and (r["tpot"] is None or r["tpot"] <= args.slo_tpot)]
    drafted, accepted = spec.get("draft_tokens", 0.0), spec.get("accepted_tokens", 0.0)
    return {
        "policy": policy, "rate": rate, "requests": len(results), "errors": len(results) - len(ok),
        "wall_s": wall, "goodput_rps": len(good) / wall, "throughput_tok_s": sum(r["tokens"] for r in ok) / wall,
        "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
        "tpot_p50": percentile(tpot, 50), "tpot_p99": percentile(tpot, 99),
        "drafted": drafted, "accepted": accepted, "acceptance": accepted / drafted if drafted else None,
        "output_tokens": sum(r["tokens"] for r in ok),
        "outputs": {r["index"]: r["text"] for r in ok},
    }


async def run_level(policy: str, rate: float, model: Path, prompts: list[dict], args, port: int, out: Path) -> dict:
    """One fresh server, one load level; the warm-up uses prompts outside the measured set."""
    proc = start_server(model, policy, args, port, out / f"server-{policy}-{rate}.log")
    try:
        await wait_ready(port, proc, args.start_timeout)
        await drive(port, args.warmup_prompts, rate=0.0, max_tokens=8, timeout=args.request_timeout, seed=0)
        before = await scrape_spec_metrics(port)
        t0 = time.monotonic()
        results = await drive(port, prompts, rate=rate, max_tokens=args.max_tokens,
                              timeout=args.request_timeout, seed=args.seed)
        wall = time.monotonic() - t0
        after = await scrape_spec_metrics(port)
        spec = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
        row = summarize(policy, rate, results, wall, spec, args)
        row["load_average"] = os.getloadavg()
        print(f"{policy:14s} rate {rate:5.2f}/s goodput {row['goodput_rps']:.3f}/s throughput "
              f"{row['throughput_tok_s']:.1f} tok/s ttft p50 {row['ttft_p50']:.2f}s tpot p50 "
              f"{row['tpot_p50'] or 0:.3f}s acceptance {row['acceptance']} load {row['load_average'][0]:.2f}",
              flush=True)
    finally:
        stop_server(proc)
    return row


def drafted_share(r: dict) -> float | None:
    """Share of the output tokens that were accepted drafts (what speculation bought, whatever it drafted)."""
    out = r.get("output_tokens") or r["throughput_tok_s"] * r["wall_s"]
    return r["accepted"] / out if r["acceptance"] is not None and out else None


def table(rows: list[dict]) -> str:
    head = ("| policy | rate (req/s) | goodput (req/s) | throughput (tok/s) | TTFT p50 / p99 (s) | TPOT p50 / p99 (s) "
            "| acceptance | output from drafts | outputs = off | load avg |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        share = drafted_share(r)
        acc += " | " + ("-" if share is None else f"{share:.2f}")
        tp50 = "-" if r["tpot_p50"] is None else f"{r['tpot_p50']:.3f} / {r['tpot_p99']:.3f}"
        lines.append(f"| {r['policy']} | {r['rate']:.2f} | {r['goodput_rps']:.3f} | {r['throughput_tok_s']:.1f} | "
                     f"{r['ttft_p50']:.2f} / {r['ttft_p99']:.2f} | {tp50} | {acc} | {r.get('exact', '-')} | "
                     f"{r['load_average'][0]:.1f} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for policy in dict.fromkeys(r["policy"] for r in rows):
        pts = sorted((r["rate"], r["goodput_rps"]) for r in rows if r["policy"] == policy)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=policy)
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("goodput (requests/s meeting TTFT and TPOT)")
    ax.set_title("SmolLM2-135M on vLLM 0.32 CPU build, 2 cores")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def add_run_args(ap: argparse.ArgumentParser, *, port: int, out: Path) -> None:
    """The SLO, timeout, port, seed and output options of every script that drives a server here."""
    ap.add_argument("--slo-ttft", type=float, default=2.0, help="TTFT target, seconds")
    ap.add_argument("--slo-tpot", type=float, default=0.15, help="TPOT target, seconds")
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument("--start-timeout", type=float, default=300.0)
    ap.add_argument("--port", type=int, default=port)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--table-from", default=None, help="re-render the markdown table of a serve_bench.json and exit")
    ap.add_argument("--rates", default="0.25,0.5,1,2", help="comma-separated request rates (req/s)")
    ap.add_argument("--requests", type=int, default=24, help="requests per rate (bounded run)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--gate-off-above", type=float, default=4)
    ap.add_argument("--log-every", type=int, default=200, help="steps between the drafter's log lines")
    add_run_args(ap, port=18411, out=ROOT / "benchmarks" / "results" / "vllm")
    args = ap.parse_args(argv)
    if args.table_from:
        print(table(json.loads(Path(args.table_from).read_text())))
        return
    args.rates = [float(x) for x in args.rates.split(",")]
    policies = [p for p in args.policies.split(",") if p]
    for p in policies:
        speculative_config(p, args.k)  # refuses unknown names before any server starts
    if args.requests < 1 or any(r < 0 for r in args.rates):
        ap.error("--requests must be >= 1 and every rate >= 0")
    if args.log_every < 0:
        ap.error(f"--log-every must be >= 0, got {args.log_every}")
    if "suffix" in policies and not (ROOT / ".arctic" / "site" / "arctic_inference").is_dir():
        print("policy suffix skipped: ArcticInference's module is not built (bash scripts/build_arctic_suffix.sh "
              ".venv-vllm/bin/python)")
        policies.remove("suffix")
    args.out.mkdir(parents=True, exist_ok=True)
    from transformers import AutoTokenizer

    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir
    from specdec.prompts import encode_first_turn, read_prompt_records

    model = vllm_ready(cache_dir() / DEFAULT_NAME)
    tok = AutoTokenizer.from_pretrained(model)
    records = read_prompt_records(str(ROOT / "specdec" / "data" / "prompts_dev_sample.jsonl"))
    prompts_all = [{"index": i, "prompt_token_ids": encode_first_turn(tok, r)} for i, r in enumerate(records)]
    if args.requests > len(prompts_all) - 2:
        ap.error(f"--requests must be <= {len(prompts_all) - 2} (distinct dev prompts, two kept for warm-up)")
    prompts = prompts_all[: args.requests]
    args.warmup_prompts = prompts_all[-2:]
    rows = []
    # Levels outer, policies inner: the load of other processes hits one level's policies alike.
    for rate in args.rates:
        for policy in policies:
            rows.append(asyncio.run(run_level(policy, rate, model, prompts, args, args.port, args.out)))
    reference = {r["rate"]: r["outputs"] for r in rows if r["policy"] == "off"}
    for r in rows:
        ref = reference.get(r["rate"])
        r["exact"] = "-" if ref is None else ("yes" if all(ref.get(i) == t for i, t in r["outputs"].items()) else "NO")
    md = table(rows)
    print(md)
    (args.out / "serve_bench.md").write_text(md + "\n")
    (args.out / "serve_bench.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k != "outputs"} for r in rows], indent=1))
    plot(rows, args.out / "serve_bench.png")
    print(f"wrote {args.out}/serve_bench.md, .json, .png")


if __name__ == "__main__":
    main()
