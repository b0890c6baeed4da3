"""Timing a target's forward steps on a grid, to fit a :class:`~specdec.estimate.step_cost.StepCostModel`.

:func:`calibrate` times specdec's own padded steps, :func:`calibrate_engine` an engine's packed
steps (one forward over decode rows and prefill chunks, as vLLM V1 runs them).
"""

from __future__ import annotations

import math
import time
from typing import Iterable

from ..estimate.step_cost import Sample, StepCostModel


# ---------------------------------------------------------------------- calibration
DEFAULT_GRID = {
    "batch": (1, 2, 4, 8),
    "tokens": (1, 2, 4, 8, 16),
    "context": (64, 384),
    "prefill": (32, 128, 320),
}


def calibrate(
    model,
    *,
    batches: Iterable[int] = DEFAULT_GRID["batch"],
    tokens: Iterable[int] = DEFAULT_GRID["tokens"],
    contexts: Iterable[int] = DEFAULT_GRID["context"],
    prefills: Iterable[int] = DEFAULT_GRID["prefill"],
    repeats: int = 3,
    meta: dict | None = None,
    progress=None,
) -> StepCostModel:
    """Time real forwards of a Hugging Face causal LM and fit a :class:`StepCostModel`: per ``(batch,
    context)`` each ``tokens`` size over the same random prefix, fastest of ``repeats`` kept, plus single
    prefills of each length in ``prefills``.

    Args:
        model: a ``transformers`` causal LM (anything whose forward takes ``input_ids``,
            ``past_key_values`` and ``use_cache``).
        progress: optional callable ``progress(done, total)``.
    """
    import inspect

    import torch
    from transformers import DynamicCache

    grid = _check_grid("calibrate", batches, tokens, contexts, prefills, repeats)
    vocab = int(model.config.vocab_size)
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    # transformers >= 5.2x names the cache argument ``cache``; older versions ``past_key_values``
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def at_context(B: int, C: int):
        cache = DynamicCache()
        ids = torch.randint(vocab, (B, C), generator=gen).to(device)
        model(input_ids=ids, use_cache=True, **{cache_kw: cache})

        def at_tokens(n: int) -> float:
            new = torch.randint(vocab, (B, n), generator=gen).to(device)
            pos = torch.arange(C, C + n, device=device).expand(B, n)

            def step():
                model(input_ids=new, position_ids=pos, use_cache=True, **{cache_kw: cache})
                cache.crop(C - cache.get_seq_length())  # negative: tokens to drop

            step()  # warm-up (allocator, kernels) at this shape
            return _fastest(step, repeats, device)

        return at_tokens

    def at_prefill(P: int) -> float:
        ids = torch.randint(vocab, (1, P), generator=gen).to(device)
        return _fastest(lambda: model(input_ids=ids, use_cache=True), repeats, device)

    with torch.inference_mode():
        samples = _sweep(*grid, at_context, at_prefill, progress)
    info = {
        "model": getattr(model.config, "name_or_path", "") or type(model).__name__,
        "dtype": str(next(model.parameters()).dtype),
        "device": str(device),
    }
    return _fit(samples, info, repeats, meta)


def calibrate_engine(
    target,
    *,
    batches: Iterable[int] = DEFAULT_GRID["batch"],
    tokens: Iterable[int] = DEFAULT_GRID["tokens"],
    contexts: Iterable[int] = DEFAULT_GRID["context"],
    prefills: Iterable[int] = DEFAULT_GRID["prefill"],
    repeats: int = 3,
    meta: dict | None = None,
    progress=None,
) -> StepCostModel:
    """Like :func:`calibrate`, timing the engine's own verify path (:class:`specdec.verify.hf.HFTarget`:
    mask, padded cache and compaction cost more than a plain forward). Each point verifies a
    ``tokens - 1``-node chain for ``batch`` ragged requests (``context`` down to ``context / 4`` tokens)
    and accepts none."""
    import torch

    from ..verify.hf import HFTarget
    from ..tree import DraftTree

    if not isinstance(target, HFTarget):
        target = HFTarget(target)
    grid = _check_grid("calibrate_engine", batches, tokens, contexts, prefills, repeats)
    gen = torch.Generator().manual_seed(0)
    vocab = target.vocab_size

    def timed(fn) -> float:
        fn()  # warm-up at this shape
        return _fastest(fn, repeats, target.device)

    def at_context(B: int, C: int):
        lens = [C - (b * (3 * C // 4)) // max(1, B - 1) for b in range(B)]
        prompts = [torch.randint(vocab, (max(1, L),), generator=gen).tolist() for L in lens]
        state, _, _ = target.prefill(prompts)
        target.set_pending(state, [0] * B)

        def at_tokens(n: int) -> float:
            chain = torch.randint(vocab, (n - 1,), generator=gen)
            trees = [DraftTree.chain(chain, vocab_size=vocab) if n > 1 else DraftTree.empty(vocab_size=vocab)] * B

            def step():
                target.verify(state, trees)
                target.commit(state, [[]] * B, [0] * B)

            return timed(step)

        return at_tokens

    def at_prefill(P: int) -> float:
        prompt = torch.randint(vocab, (P,), generator=gen).tolist()
        return timed(lambda: target.prefill([prompt]))

    samples = _sweep(*grid, at_context, at_prefill, progress)
    info = {
        "model": getattr(target.config, "name_or_path", "") or type(target.model).__name__,
        "path": "HFTarget.verify",
        "dtype": str(target.dtype),
        "device": str(target.device),
    }
    return _fit(samples, info, repeats, meta)


def _sweep(batches, tokens, contexts, prefills, at_context, at_prefill, progress) -> list[Sample]:
    """One :class:`Sample` per grid point: ``at_context(B, C)`` sets up a context once and returns
    ``at_tokens(n) -> seconds`` for each ``tokens`` size at it; ``at_prefill(P) -> seconds`` times a single
    prefill. ``progress(done, total)`` after each point."""
    total = len(batches) * len(contexts) * len(tokens) + len(prefills)
    samples: list[Sample] = []

    def record(sample: Sample) -> None:
        samples.append(sample)
        if progress:
            progress(len(samples), total)

    for B in batches:
        for C in contexts:
            at_tokens = at_context(B, C)
            for n in tokens:
                record(Sample(B, n, C, at_tokens(n)))
    for P in prefills:
        record(Sample(1, P, 0, at_prefill(P)))
    return samples


def _fit(samples: list[Sample], info: dict, repeats: int, meta: dict | None) -> StepCostModel:
    """The model fitted on ``samples``, its info ``info`` plus threads and repeats, then ``meta`` over them."""
    import torch

    info = {**info, "threads": torch.get_num_threads(), "repeats": repeats}
    info.update(meta or {})
    return StepCostModel.fit(samples, info)


def _fastest(fn, repeats: int, device) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``fn`` (synchronising a GPU ``device``)."""
    import torch

    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return float(best)


def _check_grid(what: str, batches, tokens, contexts, prefills, repeats: int):
    """The calibration grid as lists, or a ValueError naming the bad argument of ``what``."""
    batches, tokens, contexts, prefills = list(batches), list(tokens), list(contexts), list(prefills)
    if repeats < 1:
        raise ValueError(f"{what} repeats must be >= 1, got {repeats}")
    for name, vals in (("batches", batches), ("tokens", tokens), ("contexts", contexts)):
        if not vals or min(vals) < 1:
            raise ValueError(f"{what} {name} must be a non-empty list of ints >= 1, got {vals}")
    return batches, tokens, contexts, prefills
