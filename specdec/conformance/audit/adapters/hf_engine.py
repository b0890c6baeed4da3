"""Adapter: Hugging Face transformers ``generate`` with its own speculation, or specdec's loop in it.

``generate`` reports no acceptance: a forward hook counts target forwards and ``accepted = emitted - forwards``.
Speculative requests run one per call (assisted decoding is batch 1); a mixed batch is refused by the adapter;
each job runs under a forked global RNG. Settings mapping: docs/audit.md, "Engines".
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch

from ..engine import Job, Refused, Samples, request_seed, run_each
from ..settings import Sampling

METHODS = ("assistant_model", "prompt_lookup", "specdec")
SPECDEC_GENERATE = "specdec.integrations.hf.generate"
"""The ``custom_generate`` callable of specdec's Hugging Face integration (``module.attribute``)."""


@contextlib.contextmanager
def _count_forwards(model):
    counter = [0]
    handle = model.register_forward_hook(lambda *_: counter.__setitem__(0, counter[0] + 1))
    try:
        yield counter
    finally:
        handle.remove()


def _specdec_generate():
    import importlib

    module, _, attr = SPECDEC_GENERATE.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise Refused(f"specdec's Hugging Face integration ({SPECDEC_GENERATE}) is not available here: {exc}",
                      by="adapter") from None


class HFEngine:
    """``model.generate`` with ``method`` of :data:`METHODS`, ``k`` drafts per step, ``draft`` the assistant
    model; the plain arm batches ``batch`` sequences per call. ``specdec`` is refused until
    :data:`SPECDEC_GENERATE` imports."""

    name = "hf"
    profile = "hf"

    def __init__(self, model, method: str, *, draft=None, k: int = 3, batch: int = 512):
        if method not in METHODS:
            raise ValueError(f"unknown Hugging Face method {method!r}; known: {', '.join(METHODS)}")
        if method == "assistant_model" and draft is None:
            raise ValueError("the assistant_model method needs a draft model (draft=...)")
        self.model, self.method, self.draft, self.k, self.batch = model, method, draft, k, batch
        self.vocab = int(model.get_output_embeddings().weight.shape[0])

    def describe(self) -> dict:
        import transformers

        return {"engine": self.name, "method": self.method, "profile": self.profile, "k": self.k,
                "transformers": transformers.__version__, "torch": torch.__version__}

    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        # generate validates its arguments (ValueError, TypeError) before any forward: a refusal, not a crash
        return run_each(jobs, lambda job: self._run(job, speculative), refuse=(ValueError, TypeError),
                        fail=(RuntimeError,))

    def _kwargs(self, s: Sampling, speculative: bool) -> dict:
        from transformers import GenerationConfig

        sampled = dict(do_sample=False) if s.greedy else dict(do_sample=True, temperature=s.temperature,
                                                                  top_k=s.top_k or 0, top_p=s.top_p,
                                                                  min_p=s.min_p or None)
        config = GenerationConfig(**sampled, repetition_penalty=s.repetition_penalty,
                                  max_new_tokens=s.max_tokens, min_new_tokens=0, num_return_sequences=s.n,
                                  eos_token_id=list(s.stop_tokens) or None, pad_token_id=0, bos_token_id=None)
        if s.logit_bias:
            config.sequence_bias = {(t,): float(b) for t, b in s.logit_bias}
        if s.bad_tokens:
            config.bad_words_ids = [[t] for t in s.bad_tokens]
        kw: dict = {"generation_config": config}
        if s.allowed_tokens is not None:
            allowed = list(s.allowed_tokens)
            kw["prefix_allowed_tokens_fn"] = lambda batch_id, ids: allowed
        if s.presence_penalty:
            kw["presence_penalty"] = s.presence_penalty
        if s.frequency_penalty:
            kw["frequency_penalty"] = s.frequency_penalty
        if speculative:
            if self.method == "assistant_model":
                kw["assistant_model"] = self.draft
                config.num_assistant_tokens = self.k
                config.num_assistant_tokens_schedule = "constant"
            elif self.method == "prompt_lookup":
                config.prompt_lookup_num_tokens = self.k
            else:
                kw["custom_generate"] = _specdec_generate()
                kw["proposer"] = "suffix"
                kw["budget"] = self.k  # fixed, like the other methods' k: "auto" would time a cost curve per call
                config.return_dict_in_generate = True  # per-row metrics count drafts (verify skips forward hooks)
        return kw

    def _cut(self, tokens: list[int], s: Sampling) -> list[int]:
        for i, t in enumerate(tokens):
            if t in s.stop_tokens:
                return tokens[:i + 1]
        return tokens

    def _run(self, job: Job, speculative: bool) -> Samples:
        with torch.random.fork_rng(devices=[]), torch.no_grad():  # the caller's global RNG is left as it was
            return self._sample(job, speculative)

    def _sample(self, job: Job, speculative: bool) -> Samples:
        if len(set(job.sampling)) != 1:
            raise Refused("transformers' generate takes one generation config per call: a batch cannot mix settings",
                          by="adapter")
        s = job.sampling[0]
        kw = self._kwargs(s, speculative)
        per = job.n // s.n
        outputs = [[] for _ in job.prompts]
        emitted = forwards = requests = 0
        reported = {"drafted": 0, "accepted": 0} if speculative and self.method == "specdec" else None
        if not s.seeded:
            torch.manual_seed(job.seed)
        order = [(i, r) for r in range(per) for i in range(len(job.prompts))]
        one_at_a_time = speculative or s.seeded
        chunk = 1 if one_at_a_time else max(1, self.batch // s.n)
        by_prompt: dict[int, list[int]] = {}
        for i, r in order:
            by_prompt.setdefault(i, []).append(r)
        calls = [(i, rs[a:a + chunk]) for a in range(0, per, chunk) for i, rs in by_prompt.items()]
        for i, rs in calls:
            if s.seeded:
                torch.manual_seed(request_seed(job.seed, requests, s.n))
            ids = torch.tensor([list(job.prompts[i])] * len(rs))
            with _count_forwards(self.model) as count:
                seqs = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
            if reported is not None:
                reported["drafted"] += sum(m.drafted for m in seqs.metrics)
                reported["accepted"] += sum(m.accepted for m in seqs.metrics)
                seqs = seqs.sequences
            new = [self._cut(row[ids.shape[1]:].tolist(), s) for row in seqs]
            outputs[i] += new
            emitted += sum(len(x) for x in new)
            forwards += count[0]
            requests += len(rs)
        if reported is not None:
            return Samples(outputs, drafted=reported["drafted"], accepted=reported["accepted"], requests=requests,
                           extra={"emitted": emitted})
        # Hugging Face's own speculation: every target forward emits one token, the rest were accepted drafts.
        accepted = max(emitted - forwards, 0) if speculative else 0
        return Samples(outputs, drafted=None, accepted=accepted, requests=requests,
                       extra={"target_forwards": forwards, "emitted": emitted})
