"""Run an arm's jobs in a worker process and collect one outcome per job, surviving crashes.

The workers (:mod:`.vllm_worker`, :mod:`.llamacpp_worker`) read a JSON request
(``{"jobs": [...], "start": i, ...}``) and append one JSON line per job to a results file as soon
as the job is done: ``{"job": i, "outputs", "drafted", "accepted", "requests", "seconds"}``, or
``{"job": i, "refused": msg}`` / ``{"job": i, "error": msg}``; a first line
``{"engine_failed": msg}`` means the engine did not start. A worker whose engine broke inside a job
writes that job's ``error`` line and exits with :data:`EXIT_RESTART`: :func:`run_jobs` then starts
a fresh worker for the remaining jobs (an engine is never rebuilt in the process it broke in: vLLM
0.32's CPU build cannot start a second engine in a process that ran ``ngram``). A worker that dies
without a word makes the job it died in an :class:`~specdec.conformance.audit.engine.EngineFailed`
with the end of its log, and is restarted too.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from ..engine import EngineFailed, Job, Refused, Samples

EXIT_RESTART = 3
"""A worker's exit status after its engine broke in a job it reported: start a fresh one."""


def job_json(job: Job) -> dict:
    """A job as the workers read it (:class:`~specdec.conformance.audit.settings.Sampling` fields by name)."""
    return {"prompts": [list(p) for p in job.prompts], "sampling": [asdict(s) for s in job.sampling], "n": job.n,
            "seed": job.seed}


def outcome(line: dict, job: Job):
    """The outcome a result line stands for (Samples checked against ``job``)."""
    if "refused" in line:
        return Refused(line["refused"])
    if "error" in line:
        return EngineFailed(line["error"])
    samples = Samples(line["outputs"], drafted=None if line.get("drafted") is None else int(line["drafted"]),
                      accepted=None if line.get("accepted") is None else int(line["accepted"]),
                      requests=line["requests"], extra={"seconds": round(line["seconds"], 1)})
    samples.check(job)
    return samples


def run_jobs(command: Callable[[Path, Path], list[str]], env: dict, request: dict, jobs: Sequence[Job],
             timeout: float) -> tuple[list, str]:
    """One outcome per job, and the last worker's log (stdout and stderr tails)."""
    results: dict[int, object] = {}
    log = ""
    with tempfile.TemporaryDirectory(prefix="specdec-audit-") as tmp:
        req_path, out_path = Path(tmp) / "request.json", Path(tmp) / "results.jsonl"
        while len(results) < len(jobs):
            start = min(i for i in range(len(jobs)) if i not in results)
            req_path.write_text(json.dumps(dict(request, start=start)))
            out_path.write_text("")
            try:
                proc = subprocess.run(command(req_path, out_path), capture_output=True, text=True, env=env,
                                      timeout=timeout)
                code, log = proc.returncode, proc.stdout[-20000:] + proc.stderr[-20000:]
            except subprocess.TimeoutExpired as exc:
                code, log = -9, f"timed out after {timeout} s: {str(exc.stderr or '')[-4000:]}"
            lines = [json.loads(x) for x in out_path.read_text().splitlines() if x.strip()]
            if lines and "engine_failed" in lines[0]:
                why = lines[0]["engine_failed"]
                for i in range(start, len(jobs)):
                    results[i] = Refused(f"the engine did not start with this configuration: {why}")
                break
            for line in lines:
                results[line["job"]] = outcome(line, jobs[line["job"]])
            if len(results) < len(jobs) and code != EXIT_RESTART:
                if code == 0:
                    raise RuntimeError(f"the worker exited cleanly without a result for every job: {log[-2000:]}")
                first = min(i for i in range(len(jobs)) if i not in results)
                results[first] = EngineFailed(f"the worker died (exit {code}) during this setting: {log[-1500:]}")
    return [results[i] for i in range(len(jobs))], log
