"""Adapter: vLLM, in-process ``LLM`` in a worker process per engine, for every speculative method.

Each arm runs in one worker (:mod:`~specdec.conformance.audit.adapters.vllm_worker`, under the Python that
has vLLM); a crash costs only its job, and a speculative configuration refused at start makes the arm
*refused*. The checkpoint must come from :func:`~specdec.conformance.audit.fixtures.save_checkpoint` (bad
tokens go through ``bad_words``). Methods, ``cpu_expand`` and the mapping: docs/audit.md, "Engines".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from ..engine import Job
from .worker import job_json, run_jobs

DRAFTER = "specdec.integrations.vllm.drafter.SuffixDrafter"
METHODS = ("ngram", "suffix", "draft_model", "eagle", "eagle3", "custom_class")
CPU_EXPAND = ("as-shipped", "specdec-fix", "put-back-55005")
_ROOT = Path(__file__).resolve().parents[4]


def speculative_config(method: str, k: int, draft: str | None = None) -> dict:
    """vLLM's ``speculative_config`` for ``method``, ``k`` drafts (ValueError: unknown, or no draft given)."""
    if method not in METHODS:
        raise ValueError(f"unknown vLLM method {method!r}; known: {', '.join(METHODS)}")
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    if method == "suffix":
        return {"method": "suffix", "num_speculative_tokens": k}
    if method == "custom_class":
        return {"method": "custom_class", "model": DRAFTER, "num_speculative_tokens": k}
    if draft is None:
        raise ValueError(f"vLLM method {method!r} needs a draft checkpoint folder (draft=...)")
    return {"method": method, "model": str(draft), "num_speculative_tokens": k}


class VLLMEngine:
    """vLLM ``LLM`` over checkpoint folder ``model_dir``, one worker per arm under ``python``: ``method`` of
    :data:`METHODS` with ``k`` drafts (``draft``: the draft or EAGLE checkpoint), ``cpu_expand`` of
    :data:`CPU_EXPAND`, which needs ``fix_module`` (``install()``, ``KERNEL``; the command line passes
    ``specdec.integrations.vllm.cpu_sampling``) unless ``"as-shipped"``. ``extra_paths`` prefix the worker's
    ``PYTHONPATH``; a worker past ``timeout`` seconds is killed (its jobs become errors)."""

    name = "vllm"
    profile = "vllm"

    def __init__(self, model_dir, method: str, *, k: int = 3, draft=None, cpu_expand: str = "as-shipped",
                 python: str | None = None, extra_paths: Sequence[str] = (), max_num_seqs: int = 256,
                 fix_module: str | None = None, timeout: float = 1800.0):
        if cpu_expand not in CPU_EXPAND:
            raise ValueError(f"cpu_expand must be one of {CPU_EXPAND}, got {cpu_expand!r}")
        if cpu_expand != "as-shipped" and not fix_module:
            raise ValueError(f"cpu_expand={cpu_expand!r} needs fix_module (the module with the CPU expand fix)")
        self.fix_module = fix_module
        if cpu_expand == "put-back-55005" and method != "custom_class":
            raise ValueError("put-back-55005 undoes the fix specdec's drafter installs: it applies to custom_class")
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").exists():
            raise ValueError(f"{self.model_dir} is not a checkpoint folder (no config.json)")
        self.spec = speculative_config(method, k, draft)
        self.base_method, self.k, self.cpu_expand = method, k, cpu_expand
        self.method = method + {"as-shipped": "", "specdec-fix": "+specdec-fix", "put-back-55005": "+55005"}[cpu_expand]
        self.python = python or sys.executable
        self.extra_paths = [str(p) for p in extra_paths]
        self.max_num_seqs, self.timeout = max_num_seqs, timeout
        self.last_log = ""

    def describe(self) -> dict:
        out = subprocess.run([self.python, "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
                             capture_output=True, text=True, env=self._env())
        versions = out.stdout.split() if out.returncode == 0 else ["?", "?"]
        return {"engine": self.name, "method": self.method, "profile": self.profile, "vllm": versions[0],
                "torch": versions[-1], "speculative_config": self.spec, "cpu_expand": self.cpu_expand}

    def _env(self) -> dict:
        env = dict(os.environ)
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        paths = self.extra_paths + [str(_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        env["PYTHONPATH"] = os.pathsep.join(paths)
        return env

    def request(self, jobs: Sequence[Job], speculative: bool) -> dict:
        """The worker's request for one arm (see :mod:`~specdec.conformance.audit.adapters.vllm_worker`)."""
        longest = max(len(p) for j in jobs for p in j.prompts) + max(s.max_tokens for j in jobs for s in j.sampling)
        return {
            "model": str(self.model_dir), "speculative_config": self.spec if speculative else None,
            "engine_seed": int(jobs[0].seed) % (2 ** 31), "kv_cache_bytes": 1 << 28,
            "max_num_seqs": self.max_num_seqs, "max_model_len": longest + self.k + 8,
            # every prompt of a full batch fits one step: vLLM 0.32's CPU build crashes when it splits
            # a seeded request's prefill ("CPU Generator does not use offset")
            "max_num_batched_tokens": max(8192, self.max_num_seqs * (longest + self.k + 8)),
            "cpu_expand": self.cpu_expand if speculative else "as-shipped", "fix_module": self.fix_module,
            "jobs": [job_json(j) for j in jobs]}

    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        if not jobs:
            return []

        def command(req: Path, out: Path) -> list[str]:
            return [self.python, "-m", "specdec.conformance.audit.adapters.vllm_worker", str(req), str(out)]

        outcomes, self.last_log = run_jobs(command, self._env(), self.request(jobs, speculative), jobs, self.timeout)
        return outcomes

    def reproducer_source(self, job: Job) -> str:
        """``generate(speculative)`` for :mod:`~specdec.conformance.audit.reproducer`, vLLM only (plus specdec's
        CPU expand fix or put-back when the audit used them)."""
        req = self.request([job], True)
        spec = json.dumps(req["speculative_config"])
        fix = ""
        if self.cpu_expand == "specdec-fix":
            fix = ("    if speculative:  # specdec's fix for vLLM issue 55005, as the audit ran it\n"
                   f"        import {self.fix_module} as cpu_sampling\n"
                   "        cpu_sampling.install()\n")
        elif self.cpu_expand == "put-back-55005":
            fix = ("    if speculative:  # vLLM's own CPU expand kernel, registered again after specdec's fix\n"
                   "        from vllm.triton_utils.dispatcher import register_kernels\n"
                   "        from vllm.utils import cpu_triton_utils\n"
                   "        register_kernels({'vllm.v1.sample.rejection_sampler.expand_kernel': "
                   "cpu_triton_utils._expand_kernel_impl})\n")
        return f'''JOB = {json.dumps(req["jobs"][0])}


def generate(speculative):
    """outputs[prompt][sample]: this setting's requests through vLLM, with or without speculation."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    llm = LLM(model=MODEL, speculative_config={spec} if speculative else None, max_model_len={req["max_model_len"]},
              max_num_seqs={req["max_num_seqs"]}, max_num_batched_tokens={req["max_num_batched_tokens"]},
              enforce_eager=True, dtype="float32", kv_cache_memory_bytes={req["kv_cache_bytes"]}, seed=1)
{fix}    prompts, params, slots, request = [], [], [], 0
    per = [JOB["n"] // s["n"] for s in JOB["sampling"]]
    for r in range(max(per)):
        for i, p in enumerate(JOB["prompts"]):
            if r < per[i]:
                s = JOB["sampling"][i]
                kw = dict(temperature=s["temperature"], top_p=s["top_p"], min_p=s["min_p"], n=s["n"],
                          repetition_penalty=s["repetition_penalty"], presence_penalty=s["presence_penalty"],
                          frequency_penalty=s["frequency_penalty"], max_tokens=s["max_tokens"], ignore_eos=True,
                          detokenize=False, seed=JOB["seed"] + request * s["n"] if s["seeded"] else None)
                if s["top_k"] is not None:
                    kw["top_k"] = s["top_k"]
                if s["logit_bias"]:
                    kw["logit_bias"] = dict((int(t), float(b)) for t, b in s["logit_bias"])
                if s["allowed_tokens"] is not None:
                    kw["allowed_token_ids"] = list(s["allowed_tokens"])
                if s["bad_tokens"]:
                    kw["bad_words"] = ["t%d" % t for t in s["bad_tokens"]]
                if s["stop_tokens"]:
                    kw["stop_token_ids"] = list(s["stop_tokens"])
                prompts.append(dict(prompt_token_ids=list(p)))
                params.append(SamplingParams(**kw))
                slots.append(i)
                request += 1
    outputs = [[] for _ in JOB["prompts"]]
    for i, o in zip(slots, llm.generate(prompts, params, use_tqdm=False)):
        outputs[i] += [list(c.token_ids) for c in o.outputs]
    return outputs
'''
