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

    batches, tokens, contexts, prefills = _check_grid("calibrate", batches, tokens, contexts, prefills, repeats)
    vocab = int(model.config.vocab_size)
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    total = len(batches) * len(contexts) * len(tokens) + len(prefills)
    done = 0
    samples: list[Sample] = []
    # transformers >= 5.2x names the cache argument ``cache``; older versions ``past_key_values``
    cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def timed(fn) -> float:
        return _fastest(fn, repeats, device)

    with torch.inference_mode():
        for B in batches:
            for C in contexts:
                cache = DynamicCache()
                ids = torch.randint(vocab, (B, C), generator=gen).to(device)
                model(input_ids=ids, use_cache=True, **{cache_kw: cache})
                for n in tokens:
                    new = torch.randint(vocab, (B, n), generator=gen).to(device)
                    pos = torch.arange(C, C + n, device=device).expand(B, n)

                    def step():
                        model(input_ids=new, position_ids=pos, use_cache=True, **{cache_kw: cache})
                        cache.crop(C - cache.get_seq_length())  # negative: tokens to drop

                    step()  # warm-up (allocator, kernels) at this shape
                    samples.append(Sample(B, n, C, timed(step)))
                    done += 1
                    if progress:
                        progress(done, total)
        for P in prefills:
            ids = torch.randint(vocab, (1, P), generator=gen).to(device)
            samples.append(Sample(1, P, 0, timed(lambda: model(input_ids=ids, use_cache=True))))
            done += 1
            if progress:
                progress(done, total)
    info = {
        "model": getattr(model.config, "name_or_path", "") or type(model).__name__,
        "dtype": str(next(model.parameters()).dtype),
        "device": str(device),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
    }
    info.update(meta or {})
    return StepCostModel.fit(samples, info)


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
    batches, tokens, contexts, prefills = _check_grid("calibrate_engine", batches, tokens, contexts, prefills, repeats)
    gen = torch.Generator().manual_seed(0)
    vocab = target.vocab_size
    total = len(batches) * len(contexts) * len(tokens) + len(prefills)
    done = 0
    samples: list[Sample] = []

    def timed(fn) -> float:
        fn()  # warm-up at this shape
        return _fastest(fn, repeats, target.device)

    for B in batches:
        for C in contexts:
            lens = [C - (b * (3 * C // 4)) // max(1, B - 1) for b in range(B)]
            prompts = [torch.randint(vocab, (max(1, L),), generator=gen).tolist() for L in lens]
            state, _, _ = target.prefill(prompts)
            target.set_pending(state, [0] * B)
            for n in tokens:
                chain = torch.randint(vocab, (n - 1,), generator=gen)
                trees = [DraftTree.chain(chain, vocab_size=vocab) if n > 1 else DraftTree.empty(vocab_size=vocab)] * B

                def step():
                    target.verify(state, trees)
                    target.commit(state, [[]] * B, [0] * B)

                samples.append(Sample(B, n, C, timed(step)))
                done += 1
                if progress:
                    progress(done, total)
    for P in prefills:
        prompt = torch.randint(vocab, (P,), generator=gen).tolist()
        samples.append(Sample(1, P, 0, timed(lambda: target.prefill([prompt]))))
        done += 1
        if progress:
            progress(done, total)
    info = {
        "model": getattr(target.config, "name_or_path", "") or type(target.model).__name__,
        "path": "HFTarget.verify",
        "dtype": str(target.dtype),
        "device": str(target.device),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
    }
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
