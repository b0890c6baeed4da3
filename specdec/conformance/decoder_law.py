"""End-to-end law test of the whole decoder: proposer, verify forward, sampler, KV compaction.

The sampler suite (:mod:`specdec.conformance.suite`) proves the rejection sampler exact on tables.
This module tests everything around it at once: a :class:`~specdec.engine.decoder.SpeculativeDecoder`
over a real Hugging Face target generates ``length`` tokens for many identical prompts in one
ragged batch, and the empirical joint law of those tokens is compared with the exact law of
sampling the target token by token, computed independently of the decoder by teacher-forcing the
model over every continuation (:func:`exact_decoder_law`) and processing the logits with the same
:func:`~specdec.sampling.params.process_logits`.

What is tested (:data:`WINDOWS`): the joint law of the first ``k`` tokens for ``k = 3, 4, 5`` of a
5-token generation, and the joint law of tokens 3-5 alone, by the suite's G test (sparse cells
merged), one test per window with the prompts of a ragged batch as independent strata. Why 5
tokens: the first token comes from the prefill, so a step that reads a *compacted* accepted row (the
rows :meth:`HFTarget.commit` moved) needs an earlier verify step that accepted drafts, then another
step: at 3 tokens no step ever reads one, and a KV-ordering bug passes unseen. Why joint laws and
not per-position conditionals: the joint law is what the guarantee states, its G test needs no
estimated conditioning (a conditional test given the observed prefix loses one degree of freedom
per prefix), and the nested ``k`` show where an error enters. Why tokens 3-5 as well: the
5-token law has ``V ** 5`` cells, most of them pooled at a few thousand trials, while the law of
tokens 3-5 alone keeps its cells populated; against bugs in later steps it is the strongest of the
four (docs/exactness.md). A case only proves something if drafts were accepted:
:class:`DecoderStats` reports how many.

Trials run as one batch of ``trials x len(prompts)`` requests (interleaved prompts, so the batch is
ragged from the prefill on), with one seeded ``torch.Generator``: a few thousand trials take seconds.
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
        name: shown in reports.
        decoder: builds a fresh decoder (fresh proposer state) over the target under test; the
            target's model must be the model whose law is exact (a mutant may wrap it).
        sampling: the sampling settings (temperature > 0).
        prompts: the prompts of the ragged batch (distinct lengths exercise the prefill mask).
        trials: generations per prompt.
        length: tokens generated per trial (the largest tested ``k``).
        batch: requests per ``generate_batch`` call (None: all trials in one batch). Small batches
            keep the cache free of holes (every request the same length), which is what routes
            ``attention="tree_op"`` verify steps through the tree-attention op; they cost a
            decoder call per batch.
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
    target after ``prompt`` (index = base-``V`` number, first token most significant).

    One teacher-forced forward of the plain model over all ``V ** (length - 1)`` continuations (no
    cache, no specdec code): row ``j`` of continuation ``c`` is the law of token ``j + 1`` after
    ``prompt + c[:j]``. Logits are processed in float32 exactly as the decoder processes its own.
    """
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
    """Generate ``length`` tokens ``trials`` times per prompt, prompts interleaved (a ragged batch),
    ``batch`` requests per decoder call (None: one call), one seeded generator throughout.

    Returns one ``LongTensor[trials, length]`` per prompt and the decoder's :class:`DecoderStats`.
    Raises ValueError if a generation stopped early (stop tokens are disabled).
    """
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
