"""End-to-end law test of the whole decoder: proposer, verify forward, sampler, KV compaction.

A :class:`~specdec.engine.decoder.SpeculativeDecoder` over a real HF target generates ``length``
tokens for many prompts in one ragged batch (one seeded generator); their joint law is G-tested
against the exact law of sampling the target token by token, computed without specdec by
teacher-forcing every continuation (:func:`exact_decoder_law`). Windows (:data:`WINDOWS`): the first
``k = 3, 4, 5`` tokens and tokens 3-5 alone (5 tokens, because reading a compacted row needs a step
after one that accepted drafts; tokens 3-5 keep their cells populated). Prompts are independent
strata. A case proves something only if drafts were accepted (:class:`DecoderStats`). Reasoning in
docs/exactness.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .suite import FAMILY_ALPHA, GTestResult, SuiteReport, window_law_tests
from ..sampling.params import SamplingParams, process_logits

WINDOWS = ((1, 3), (1, 4), (1, 5), (3, 5))
"""``(first, last)``: the generated tokens (1-based, inclusive) whose joint law is tested."""


@dataclass(frozen=True)
class DecoderCase:
    """One end-to-end scenario.

    Attributes:
        decoder: builds a fresh decoder over the target whose model's law is exact (a mutant may wrap it).
        sampling: temperature > 0. ``prompts``: the ragged batch. ``trials``: generations per prompt.
        length: tokens per trial (the largest tested ``k``).
        batch: requests per ``generate_batch`` call (None: one); small batches keep the cache free of
            holes, which routes ``attention="tree_op"`` steps through the tree op.
    """

    name: str
    decoder: Callable[[], object]
    sampling: SamplingParams
    prompts: tuple[tuple[int, ...], ...]
    trials: int = 2000
    length: int = 5
    batch: int | None = None


@dataclass(frozen=True)
class DecoderStats:
    """What the decoder did: steps and accepted draft tokens over all trials (``accepted == 0``
    would mean the case never exercised acceptance or compaction)."""

    steps: int
    drafted: int
    accepted: int

    @property
    def accepted_per_step(self) -> float:
        return self.accepted / max(self.steps, 1)


@torch.no_grad()
def exact_decoder_law(model, prompt: Sequence[int], length: int, sampling: SamplingParams) -> torch.Tensor:
    """``float64 [V ** length]``: the law of ``length`` tokens sampled one at a time from the processed
    target after ``prompt`` (base-``V`` index, first token most significant), from one teacher-forced
    forward of the plain model over all continuations."""
    vocab = int(model.get_output_embeddings().weight.shape[0])
    M = vocab ** (length - 1)
    digits = vocab ** torch.arange(length - 2, -1, -1)
    cont = (torch.arange(M).unsqueeze(1) // digits) % vocab  # [M, length - 1], first token most significant
    ids = torch.cat([torch.tensor(list(prompt)).expand(M, -1), cont], 1)
    logits = model(input_ids=ids).logits[:, len(prompt) - 1:].float()  # [M, length, V]
    probs = process_logits(logits, sampling.temperature, sampling.top_k, sampling.top_p).double()
    law = probs[:, :-1].gather(2, cont.unsqueeze(2)).squeeze(2).prod(1)  # [M]: tokens 1 .. length - 1
    return (law.unsqueeze(1) * probs[:, -1]).reshape(-1)


def sample_decoder(decoder, prompts: Sequence[Sequence[int]], trials: int, length: int, sampling: SamplingParams,
                   *, seed: int = 0, batch: int | None = None) -> tuple[list[torch.Tensor], DecoderStats]:
    """``length`` tokens ``trials`` times per prompt (interleaved, ``batch`` per call, one generator):
    one long ``[trials, length]`` per prompt and :class:`DecoderStats`; ValueError on an early stop."""
    requests = [list(p) for _ in range(trials) for p in prompts]
    step = batch or len(requests)
    gen = torch.Generator().manual_seed(seed)
    results = []
    for start in range(0, len(requests), step):
        results += decoder.generate_batch(requests[start:start + step], length, sampling, stop_tokens=(),
                                          generator=gen)
    short = [i for i, r in enumerate(results) if len(r.tokens) != length]
    if short:
        raise ValueError(f"{len(short)} generations did not produce {length} tokens (first: request {short[0]})")
    tokens = torch.tensor([r.tokens for r in results], dtype=torch.long)
    stats = DecoderStats(sum(r.metrics.steps for r in results), sum(r.metrics.drafted for r in results),
                         sum(r.metrics.accepted for r in results))
    return [tokens[i::len(prompts)] for i in range(len(prompts))], stats


def check_decoder(case: DecoderCase, *, seed: int = 0, windows: Sequence[tuple[int, int]] = WINDOWS
                  ) -> tuple[list[GTestResult], DecoderStats]:
    """Run ``case`` once; G-test the joint law of each window of tokens against the exact law."""
    decoder = case.decoder()
    model = decoder.target.model
    seqs, stats = sample_decoder(decoder, case.prompts, case.trials, case.length, case.sampling, seed=seed,
                                 batch=case.batch)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    strata = [(s, exact_decoder_law(model, p, case.length, case.sampling)) for s, p in zip(seqs, case.prompts)]
    return window_law_tests(case.name, strata, vocab, windows), stats


def run_decoder_suite(cases: Sequence[DecoderCase], *, alpha: float = FAMILY_ALPHA, seed: int = 0,
                      windows: Sequence[tuple[int, int]] = WINDOWS) -> tuple[SuiteReport, dict[str, DecoderStats]]:
    """Every case, ``len(windows)`` tests each, at family-wise level ``alpha`` (Bonferroni over all of
    them); case ``i`` runs with seed ``seed + 1000 * i``."""
    report = SuiteReport(alpha=alpha, planned_tests=len(windows) * len(cases))
    stats = {}
    for i, case in enumerate(cases):
        results, stats[case.name] = check_decoder(case, seed=seed + 1000 * i, windows=windows)
        report.results.extend(results)
    return report, stats
