"""Building blocks of the engine tests: tiny random Llama checkpoints and vLLM engines with or without specdec.

Kept apart from the tests so each test reads as what it checks. Engines are in-process, eager,
float32, with a small fixed KV cache so they start in seconds on a 2-core machine.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from pathlib import Path

from specdec.conformance.audit.adapters.vllm_worker import without_llvmlite

DRAFTER = "specdec.integrations.vllm.drafter.SuffixDrafter"


def tiny_llama(path: Path, *, vocab: int = 256, scale: float = 8.0, seed: int = 0) -> Path:
    """A random Llama (head_dim 64: vLLM's CPU attention needs >= 64) saved as a safetensors checkpoint.

    ``scale`` multiplies the LM head: 8 makes greedy paths clear of near-ties, ~1 keeps the
    sampling distribution spread (the law test needs every token to have real probability).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if (path / "config.json").exists():
        return path
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=64, max_position_embeddings=1024,
                      bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    model.save_pretrained(path)
    return path


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct: specdec's converted safetensors folder, made loadable by vLLM (checkpoint.py)."""
    from specdec.integrations.vllm.checkpoint import vllm_ready
    from specdec.models import DEFAULT_NAME, cache_dir, load_default

    target = cache_dir() / DEFAULT_NAME
    if not (target / "model.safetensors").exists():
        load_default()  # converts once into the cache
    return vllm_ready(target)


def spec_config(k: int = 3) -> dict:
    return {"method": "custom_class", "model": DRAFTER, "num_speculative_tokens": k}


@contextlib.contextmanager
def engine(model: Path, *, speculative: dict | None, options: dict | None = None, tokenizer: bool = False,
           max_num_seqs: int = 16, max_model_len: int = 1024, seed: int = 0, kv_cache_bytes: int = 1 << 28,
           max_num_batched_tokens: int | None = None):
    """An in-process ``vllm.LLM``; ``options`` become SPECDEC_VLLM_OPTIONS while it is built."""
    from vllm import LLM

    old = os.environ.get("SPECDEC_VLLM_OPTIONS")
    os.environ["SPECDEC_VLLM_OPTIONS"] = json.dumps(options or {})
    try:
        # An earlier test in this process may have run vLLM's ngram method, which loads numba and llvmlite; the CPU
        # platform's kernel registration then trips on llvmlite (docs/audit.md, "One engine per process").
        with without_llvmlite():
            llm = LLM(model=str(model), skip_tokenizer_init=not tokenizer, speculative_config=speculative,
                      max_model_len=max_model_len, max_num_seqs=max_num_seqs, enforce_eager=True, dtype="float32",
                      kv_cache_memory_bytes=kv_cache_bytes, gpu_memory_utilization=0.2, disable_log_stats=False,
                      seed=seed, **({} if max_num_batched_tokens is None else
                                    {"max_num_batched_tokens": max_num_batched_tokens, "enable_chunked_prefill": True}))
    finally:
        if old is None:
            os.environ.pop("SPECDEC_VLLM_OPTIONS")
        else:
            os.environ["SPECDEC_VLLM_OPTIONS"] = old
    try:
        yield llm
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def metric(llm, name: str, **labels) -> float:
    """Sum of a counter/gauge from ``LLM.get_metrics()`` over samples whose labels include ``labels``."""
    total, found = 0.0, False
    for m in llm.get_metrics():
        if m.name == name and all(m.labels.get(k) == v for k, v in labels.items()):
            total += float(m.value)
            found = True
    if not found:
        raise KeyError(f"metric {name} {labels or ''} not in LLM.get_metrics()")
    return total


def token_prompts(n: int, *, vocab: int, seed: int = 0) -> list[dict]:
    """Token-id prompts that repeat themselves (so lookup drafts have something to find)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = rng.integers(2, vocab, int(rng.integers(4, 12))).tolist()
        out.append({"prompt_token_ids": base * int(rng.integers(2, 4)) + base[: int(rng.integers(0, len(base)))]})
    return out


def greedy(llm, prompts, max_tokens: int) -> list[list[int]]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False)
    return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]
