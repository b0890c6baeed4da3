"""One vLLM engine in its own process: runs an audit arm's jobs and streams each job's outcome.

``python -m specdec.conformance.audit.adapters.vllm_worker REQUEST.json RESULTS.jsonl``, started by
:class:`~specdec.conformance.audit.adapters.vllm.VLLMEngine` (why one process per engine: docs/audit.md,
"Engines"). REQUEST: ``{"model", "speculative_config" (or null), "engine_seed", "kv_cache_bytes",
"max_num_seqs", "cpu_expand", "fix_module", "jobs": [...], "start": i}``; results and restarts follow
:mod:`.worker`'s protocol. Imports only vLLM, the standard library and ``fix_module``, never the rest of specdec.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback

from .worker import EXIT_RESTART

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

_ENGINE_FRAMES = {"_run_engine", "step", "execute_model", "sample_tokens", "step_with_batch_queue"}
"""Frames that mean an exception came from inside a running engine step (a crash), not validation."""


@contextlib.contextmanager
def without_llvmlite():
    """Hide llvmlite's modules from ``sys.modules`` inside the block, so vLLM's ``register_kernels`` scan does
    not trip on llvmlite's ``lib`` once numba is loaded (docs/audit.md, "One engine per process")."""
    hidden = {name: mod for name, mod in sys.modules.items() if name == "llvmlite" or name.startswith("llvmlite.")}
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


def _params(s: dict, seed: int | None):
    from vllm import SamplingParams

    kw = dict(temperature=s["temperature"], top_p=s["top_p"], min_p=s["min_p"], n=s["n"],
              repetition_penalty=s["repetition_penalty"], presence_penalty=s["presence_penalty"],
              frequency_penalty=s["frequency_penalty"], max_tokens=s["max_tokens"], ignore_eos=True,
              detokenize=False, seed=seed)
    if s["top_k"] is not None:
        kw["top_k"] = s["top_k"]
    if s["logit_bias"]:
        kw["logit_bias"] = {int(t): float(b) for t, b in s["logit_bias"]}
    if s["allowed_tokens"] is not None:
        kw["allowed_token_ids"] = list(s["allowed_tokens"])
    if s["bad_tokens"]:
        kw["bad_words"] = [f"t{t}" for t in s["bad_tokens"]]  # the audit checkpoint's word-level tokenizer
    if s["stop_tokens"]:
        kw["stop_token_ids"] = list(s["stop_tokens"])
    return SamplingParams(**kw)


def _counters(llm) -> tuple[float, float]:
    drafted = accepted = 0.0
    for m in llm.get_metrics():
        if m.name == "vllm:spec_decode_num_draft_tokens":
            drafted += float(m.value)
        elif m.name == "vllm:spec_decode_num_accepted_tokens":
            accepted += float(m.value)
    return drafted, accepted


def _build(req: dict):
    from vllm import LLM

    llm = LLM(model=req["model"], speculative_config=req["speculative_config"], max_model_len=req["max_model_len"],
              max_num_seqs=req["max_num_seqs"], max_num_batched_tokens=req["max_num_batched_tokens"],
              enforce_eager=True, dtype="float32", kv_cache_memory_bytes=req["kv_cache_bytes"],
              gpu_memory_utilization=0.2, disable_log_stats=False, seed=req["engine_seed"])
    mode = req["cpu_expand"]
    if mode != "as-shipped":
        import importlib

        fix = importlib.import_module(req["fix_module"])  # specdec's vLLM integration, named by the caller
        with without_llvmlite():
            if mode == "specdec-fix":
                fix.install()
            elif mode == "put-back-55005":
                from vllm.triton_utils.dispatcher import register_kernels
                from vllm.utils import cpu_triton_utils

                register_kernels({fix.KERNEL: cpu_triton_utils._expand_kernel_impl})
    return llm


def _run(llm, job: dict) -> dict:
    s, n = job["sampling"], job["n"]
    prompts, params, slots = [], [], []
    per = [n // x["n"] for x in s]
    request = 0
    for r in range(max(per)):
        for i, p in enumerate(job["prompts"]):
            if r < per[i]:
                seed = job["seed"] + request * s[i]["n"] if s[i]["seeded"] else None
                prompts.append({"prompt_token_ids": list(p)})
                params.append(_params(s[i], seed))
                slots.append(i)
                request += 1
    before = _counters(llm)
    outs = llm.generate(prompts, params, use_tqdm=False)
    after = _counters(llm)
    outputs = [[] for _ in job["prompts"]]
    for i, o in zip(slots, outs):
        outputs[i] += [list(c.token_ids) for c in o.outputs]
    return {"outputs": outputs, "drafted": after[0] - before[0], "accepted": after[1] - before[1],
            "requests": len(prompts)}


def main(argv: list[str]) -> None:
    req = json.loads(open(argv[0]).read())
    sink = open(argv[1], "a")

    def emit(obj):
        sink.write(json.dumps(obj) + "\n")
        sink.flush()

    try:
        llm = _build(req)
    except Exception as exc:  # the engine refused its configuration or failed to start
        emit({"engine_failed": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-4000:]})
        return
    for index, job in enumerate(req["jobs"]):
        if index < req.get("start", 0):
            continue
        t0 = time.time()
        try:
            res = _run(llm, job)
        except Exception as exc:
            frames = {f.name for f in traceback.extract_tb(exc.__traceback__)}
            kind = "error" if frames & _ENGINE_FRAMES else "refused"
            emit({"job": index, kind: f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-4000:],
                  "seconds": time.time() - t0})
            if kind == "error":  # the engine may be dead, and cannot be rebuilt in this process: ask for a new one
                sink.close()
                os._exit(EXIT_RESTART)
            continue
        res.update(job=index, seconds=time.time() - t0)
        emit(res)
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
