"""Adapter: specdec's own :class:`~specdec.engine.decoder.SpeculativeDecoder`.

Settings map onto :class:`~specdec.sampling.params.SamplingParams` and a transformers ``GenerationConfig`` whose
processors the decoder applies per verify row (profile ``"hf"``). Refused by the adapter: presence and frequency
penalties, ``n > 1``, mixed batches (docs/audit.md, "Engines"). Seeded requests run one call each.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from ..engine import Job, Refused, Samples, request_seed, run_each
from ..settings import Sampling


class SpecdecEngine:
    """specdec's decoder over ``model`` with the proposer ``make_proposer()`` builds (fresh per job).

    Args:
        model: the Hugging Face target.
        make_proposer: ``() -> Proposer``; default: :class:`~specdec.proposers.suffix.SuffixProposer`.
        method: the proposer's name in reports.
        budget: draft tokens per request per step (the decoder's fixed budget).
        batch: requests per ``generate_batch`` call.
    """

    name = "specdec"
    profile = "hf"

    def __init__(self, model, make_proposer: Callable | None = None, *, method: str = "suffix", budget: int = 4,
                 batch: int = 512):
        self.model, self.method, self.budget, self.batch = model, method, budget, batch
        if make_proposer is None:
            from ....proposers.suffix import SuffixProposer

            vocab = int(model.get_output_embeddings().weight.shape[0])
            make_proposer = lambda: SuffixProposer(vocab)  # noqa: E731
        self.make_proposer = make_proposer

    def describe(self) -> dict:
        import specdec

        return {"engine": self.name, "method": self.method, "profile": self.profile, "budget": self.budget,
                "specdec": getattr(specdec, "__version__", "?")}

    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        return run_each(jobs, lambda job: self._run(job, speculative), fail=(RuntimeError, ValueError, TypeError))

    @staticmethod
    def _translate(s: Sampling, vocab: int):
        from transformers import GenerationConfig

        from ....sampling.params import SamplingParams

        if s.presence_penalty or s.frequency_penalty:
            raise Refused("specdec's decoder applies transformers' processors, which have no presence or frequency "
                          "penalty", by="adapter")
        if s.n != 1:
            raise Refused("specdec's decoder makes one output per prompt (no n > 1)", by="adapter")
        config = GenerationConfig()
        if s.repetition_penalty != 1.0:
            config.repetition_penalty = s.repetition_penalty
        if s.logit_bias:
            config.sequence_bias = {(t,): float(b) for t, b in s.logit_bias}
        if s.bad_tokens:
            config.bad_words_ids = [[t] for t in s.bad_tokens]
        if s.allowed_tokens is not None:
            config.suppress_tokens = [t for t in range(vocab) if t not in set(s.allowed_tokens)]
        return SamplingParams(s.temperature, s.top_k, s.top_p, s.min_p), config

    def _run(self, job: Job, speculative: bool) -> Samples:
        from ....engine.decoder import SpeculativeDecoder

        if len(set(job.sampling)) != 1:
            raise Refused("specdec's decoder takes one SamplingParams and one generation config per generate_batch "
                          "call: a batch cannot mix settings", by="adapter")
        s = job.sampling[0]
        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        params, config = self._translate(s, vocab)
        decoder = SpeculativeDecoder(self.model, self.make_proposer() if speculative else None,
                                     max_budget=self.budget, budget=self.budget, generation_config=config)
        order = [(i, j) for j in range(job.n) for i in range(len(job.prompts))]  # interleaved prompts
        results = []
        if s.seeded:
            for r, (i, _) in enumerate(order):
                gen = torch.Generator().manual_seed(request_seed(job.seed, r))
                results += decoder.generate_batch([list(job.prompts[i])], s.max_tokens, params,
                                                  stop_tokens=s.stop_tokens, generator=gen)
        else:
            gen = torch.Generator().manual_seed(job.seed)
            for start in range(0, len(order), self.batch):
                chunk = order[start:start + self.batch]
                results += decoder.generate_batch([list(job.prompts[i]) for i, _ in chunk], s.max_tokens, params,
                                                  stop_tokens=s.stop_tokens, generator=gen)
        outputs = [[None] * job.n for _ in job.prompts]
        for (i, j), res in zip(order, results):
            outputs[i][j] = list(res.tokens)
        return Samples(outputs, drafted=sum(r.metrics.drafted for r in results),
                       accepted=sum(r.metrics.accepted for r in results), requests=len(results))
