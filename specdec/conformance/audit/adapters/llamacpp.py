"""Adapter: llama.cpp through llama-cpp-python, speculating with ``LlamaPromptLookupDecoding``.

The checkpoint is exported once to a float32 GGUF (:mod:`.gguf_export`); every arm runs in a standalone worker
(:mod:`.llamacpp_worker`) that needs only llama-cpp-python, numpy, ``gguf`` and ``safetensors``. Refused by the
adapter: ``n > 1`` and mixed batches. Seeds and KV cache: docs/audit.md, "Engines".
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Sequence

from ..engine import Job, Refused
from .worker import job_json, run_jobs

_HERE = Path(__file__).resolve().parent


class LlamaCppEngine:
    """llama-cpp-python over ``model_dir`` (exported to ``gguf``, default ``model_dir/model.gguf``).

    Args:
        model_dir: a Llama checkpoint folder (config.json + model.safetensors).
        python: the interpreter that has llama-cpp-python.
        k: ``num_pred_tokens`` of the prompt-lookup drafter.
        max_ngram: its ``max_ngram_size``.
    """

    name = "llamacpp"
    method = "prompt_lookup"
    profile = "llamacpp"

    def __init__(self, model_dir, python: str, *, k: int = 3, max_ngram: int = 3, gguf: Path | None = None,
                 timeout: float = 3600.0):
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").exists():
            raise ValueError(f"{self.model_dir} is not a checkpoint folder (no config.json)")
        self.python, self.k, self.max_ngram, self.timeout = python, k, max_ngram, timeout
        self.gguf = Path(gguf) if gguf is not None else self.model_dir / "model.gguf"
        self.last_log = ""

    def _export(self) -> None:
        if self.gguf.exists():
            return
        proc = subprocess.run([self.python, str(_HERE / "gguf_export.py"), str(self.model_dir), str(self.gguf)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"exporting {self.model_dir} to GGUF failed: {proc.stderr[-2000:]}")

    def describe(self) -> dict:
        out = subprocess.run([self.python, "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                             capture_output=True, text=True)
        return {"engine": self.name, "method": self.method, "profile": self.profile, "k": self.k,
                "max_ngram": self.max_ngram, "llama_cpp_python": out.stdout.strip() or "?"}

    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        outcomes: list = [None] * len(jobs)
        todo = []
        for i, job in enumerate(jobs):
            if len(set(job.sampling)) != 1:
                outcomes[i] = Refused("llama-cpp-python decodes one sequence at a time: there is no batch to mix "
                                      "settings in", by="adapter")
            elif any(s.n != 1 for s in job.sampling):
                outcomes[i] = Refused("llama-cpp-python's generate makes one output per call (no n > 1)", by="adapter")
            else:
                todo.append(i)
        if todo:
            self._export()
            sub = [jobs[i] for i in todo]
            longest = max(len(p) for j in sub for p in j.prompts) + max(s.max_tokens for j in sub for s in j.sampling)
            request = {"gguf": str(self.gguf), "speculative": speculative, "k": self.k, "max_ngram": self.max_ngram,
                       "n_ctx": 2 * (longest + self.k + 8), "jobs": [job_json(j) for j in sub]}

            def command(req: Path, out: Path) -> list[str]:
                return [self.python, str(_HERE / "llamacpp_worker.py"), str(req), str(out)]

            results, self.last_log = run_jobs(command, dict(os.environ), request, sub, self.timeout)
            for i, res in zip(todo, results):
                outcomes[i] = res
        return outcomes

    def reproducer_source(self, job: Job) -> str:
        """``generate(speculative)`` for :mod:`~specdec.conformance.audit.reproducer`, llama-cpp-python only."""
        worker = (_HERE / "llamacpp_worker.py").read_text()
        body = worker[worker.index("class RecordingLookup"):worker.index("def main(")]
        return f'''import json
{body}
JOB = {job_json(job)!r}
GGUF = {str(self.gguf)!r}


def generate(speculative):
    """outputs[prompt][sample]: this setting's requests through llama-cpp-python."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    recorder = RecordingLookup(LlamaPromptLookupDecoding(max_ngram_size={self.max_ngram}, num_pred_tokens={self.k})) \\
        if speculative else None
    llm = Llama(model_path=GGUF, n_ctx=256, n_batch=256, n_threads=1, seed=0, draft_model=recorder, verbose=False,
                type_k=F32, type_v=F32)
    outputs = [[] for _ in JOB["prompts"]]
    request = 0
    for r in range(JOB["n"]):
        for i, (p, s) in enumerate(zip(JOB["prompts"], JOB["sampling"])):
            outputs[i].append(_request(llm, recorder, p, s, JOB["seed"] + request)[0])
            request += 1
    return outputs
'''
