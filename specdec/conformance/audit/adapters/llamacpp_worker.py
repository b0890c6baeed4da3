"""One llama.cpp model (llama-cpp-python) in its own process: runs an arm's jobs, one result line each.

Standalone on purpose: ``python llamacpp_worker.py REQUEST.json RESULTS.jsonl`` runs in the Python
that has llama-cpp-python and numpy, which need not have torch or specdec. The protocol is
:mod:`.worker`'s. REQUEST: ``{"gguf", "speculative": bool, "k", "max_ngram", "n_ctx", "jobs", "start"}``.

Each request is one ``Llama.generate`` call (llama-cpp-python decodes one sequence at a time) with
the request's own seed (``Llama.set_seed``; the sampler chain is rebuilt with it on every call),
its settings as ``generate``'s arguments (top-k 0, top-p 1, min-p 0 and typical-p 1 are off; logit
bias, bad and allowed tokens as a logits processor; stop tokens as a stopping criterion), until
``max_tokens`` tokens or a stop. With speculation the model has ``draft_model =
LlamaPromptLookupDecoding(max_ngram, k)`` wrapped to record each draft, and the accepted draft
tokens are counted from the outputs: llama-cpp-python samples every drafted position and keeps a
draft token exactly while the sample equals it, so the tokens emitted after a draft that match it
are the accepted ones.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import numpy as np


F32 = 0
"""GGML_TYPE_F32 for the KV cache: llama.cpp's default f16 cache moves this checkpoint's logits by
~1e-3 from the float32 forward the law is enumerated with; float32 keeps them within ~5e-6."""


class RecordingLookup:
    """``LlamaPromptLookupDecoding`` that remembers ``(context length, draft)`` of every call."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def __call__(self, input_ids, /, **kwargs):
        draft = self.inner(input_ids, **kwargs)
        self.calls.append((int(input_ids.shape[0]), [int(t) for t in draft]))
        return draft


def _processor(s: dict, vocab: int):
    bias = np.zeros(vocab, dtype=np.float32)
    for t, b in s["logit_bias"]:
        bias[int(t)] += float(b)
    if s["allowed_tokens"] is not None:
        mask = np.full(vocab, -np.inf, dtype=np.float32)
        mask[list(s["allowed_tokens"])] = 0
        bias += mask
    for t in s["bad_tokens"]:
        bias[int(t)] = -np.inf
    if not bias.any():
        return None

    def apply(input_ids, scores):
        return scores + bias

    return apply


def stop_after(prompt_len: int, stops: set[int]):
    """llama-cpp-python's stopping criterion: True once an emitted token is in ``stops``.

    ``generate`` calls it with the evaluated ids, which end with the token emitted one step earlier
    (on the first step, the prompt's last token), and ends without yielding the token just sampled:
    so a stop token is emitted, then generation ends; a prompt that ends in a stop token stops nothing.
    """
    return lambda ids, logits: len(ids) > prompt_len and int(ids[-1]) in stops


def _request(llm, recorder, prompt, s: dict, seed: int) -> tuple[list[int], int, int]:
    from llama_cpp import LogitsProcessorList, StoppingCriteriaList

    stops = set(s["stop_tokens"])
    proc = _processor(s, llm.n_vocab())
    llm.set_seed(seed)
    if recorder is not None:
        recorder.calls.clear()
    out = []
    gen = llm.generate(list(prompt), top_k=s["top_k"] or 0, top_p=s["top_p"], min_p=s["min_p"], typical_p=1.0,
                       temp=s["temperature"], repeat_penalty=s["repetition_penalty"],
                       frequency_penalty=s["frequency_penalty"], presence_penalty=s["presence_penalty"],
                       logits_processor=LogitsProcessorList([proc]) if proc else None,
                       stopping_criteria=StoppingCriteriaList([stop_after(len(prompt), stops)]) if stops else None)
    for tok in gen:
        out.append(int(tok))
        if len(out) >= s["max_tokens"]:
            break
    gen.close()
    drafted = accepted = 0
    if recorder is not None:
        full = list(prompt) + out
        for pos, draft in recorder.calls:
            if pos >= len(full):
                continue
            drafted += len(draft)
            for a, b in zip(draft, full[pos:]):
                if a != b:
                    break
                accepted += 1
    return out, drafted, accepted


def main(argv: list[str]) -> None:
    req = json.loads(open(argv[0]).read())
    sink = open(argv[1], "a")

    def emit(obj):
        sink.write(json.dumps(obj) + "\n")
        sink.flush()

    try:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        recorder = RecordingLookup(LlamaPromptLookupDecoding(max_ngram_size=req["max_ngram"],
                                                             num_pred_tokens=req["k"])) if req["speculative"] else None
        llm = Llama(model_path=req["gguf"], n_ctx=req["n_ctx"], n_batch=req["n_ctx"], n_threads=1, seed=0,
                    draft_model=recorder, verbose=False, type_k=F32, type_v=F32)
    except Exception as exc:
        emit({"engine_failed": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-4000:]})
        return
    for index, job in enumerate(req["jobs"]):
        if index < req.get("start", 0):
            continue
        t0 = time.time()
        try:
            outputs = [[] for _ in job["prompts"]]
            drafted = accepted = requests = 0
            per = [job["n"] // s["n"] for s in job["sampling"]]
            for r in range(max(per)):
                for i, (p, s) in enumerate(zip(job["prompts"], job["sampling"])):
                    if r >= per[i]:
                        continue
                    if s["n"] != 1:
                        raise ValueError("llama-cpp-python's generate makes one output per call (no n > 1)")
                    out, d, a = _request(llm, recorder, p, s, job["seed"] + requests)
                    outputs[i].append(out)
                    drafted, accepted, requests = drafted + d, accepted + a, requests + 1
        except ValueError as exc:
            emit({"job": index, "refused": f"{type(exc).__name__}: {exc}", "seconds": time.time() - t0})
            continue
        except Exception as exc:  # the model may be in any state: a fresh process for the rest (exit 3)
            emit({"job": index, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-4000:],
                  "seconds": time.time() - t0})
            sink.close()
            os._exit(3)  # worker.EXIT_RESTART (this script runs without specdec)
        emit({"job": index, "outputs": outputs, "drafted": drafted if recorder else 0,
              "accepted": accepted if recorder else 0, "requests": requests, "seconds": time.time() - t0})


if __name__ == "__main__":
    main(sys.argv[1:])
