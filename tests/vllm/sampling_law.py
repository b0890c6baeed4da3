"""The sampled-law check's inputs: a prompt on a 16-token vocabulary, two sampling settings, the exact
law of the first three tokens and the tokens an engine emits.

Shared by tests/vllm/test_vllm_sampling_law.py (3000 seeded requests per arm) and
``benchmarks.vllm.law_samples`` (the same arms at a sample size of your choice).
"""

from __future__ import annotations

import numpy as np
import torch

VOCAB = 16
PROMPT = list(range(2, VOCAB)) * 2  # every token has a continuation in the prompt: the drafter always drafts
FULL = dict(temperature=0.8, top_k=10, top_p=0.95)
TEMPERATURE = dict(temperature=0.8)


def exact_law(path, law: dict) -> torch.Tensor:
    """P(t1, t2, t3) [V, V, V] of sampling the processed target token by token."""
    from transformers import LlamaForCausalLM

    from specdec import SamplingParams

    m = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    sp = SamplingParams(**law)

    def dist(ctx_batch):
        with torch.no_grad():
            logits = m(torch.tensor(ctx_batch)).logits[:, -1].double()
        return sp.process(logits)  # probabilities [rows, V]

    p1 = dist([PROMPT])[0]
    p2 = dist([PROMPT + [a] for a in range(VOCAB)])
    p3 = dist([PROMPT + [a, b] for a in range(VOCAB) for b in range(VOCAB)]).view(VOCAB, VOCAB, VOCAB)
    return p1[:, None, None] * p2[:, :, None] * p3


def emitted(llm, law: dict, trials: int, first_seed: int = 0) -> np.ndarray:
    """``[trials, 3]``: the first three tokens of ``trials`` requests seeded ``first_seed`` onwards."""
    from vllm import SamplingParams

    params = [SamplingParams(max_tokens=3, ignore_eos=True, detokenize=False, seed=first_seed + i, **law)
              for i in range(trials)]
    outs = llm.generate([{"prompt_token_ids": PROMPT}] * trials, params, use_tqdm=False)
    return np.array([list(o.outputs[0].token_ids) for o in outs])
