"""Tiny Hugging Face targets whose next-token law depends on the whole context.

KV-compaction and position-id bugs corrupt what the model reads about older tokens, so a law test
sees them only on a target whose next-token law moves with older tokens and positions; a random tiny
Llama is nearly a bigram model. :func:`context_target` is a small-vocabulary Llama (exact laws can be
enumerated) with scaled weights: query/key (sharp, position-dependent attention), value/output
(attention dominates the residual stream) and LM head (peaked, far from a point mass).
:func:`context_dependence` measures it (figures in docs/exactness.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


def context_target(vocab: int = 8, *, hidden: int = 16, layers: int = 2, heads: int = 2, kv_heads: int = 1,
                   qk_scale: float = 30.0, vo_scale: float = 20.0, lm_scale: float = 25.0, seed: int = 0):
    """A random fp32 Llama in eval mode whose next-token law depends strongly on the whole context
    (built under a forked RNG: the caller's torch seed is untouched)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=256, bos_token_id=0, eos_token_id=1, pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            attn = layer.self_attn
            for proj, scale in ((attn.q_proj, qk_scale), (attn.k_proj, qk_scale), (attn.v_proj, vo_scale),
                                (attn.o_proj, vo_scale)):
                proj.weight.mul_(scale)
        model.lm_head.weight.mul_(lm_scale)
    return model.eval()


def noisy_copy(model, *, std: float, seed: int = 0):
    """A copy of ``model`` with Gaussian noise of relative size ``std`` on every weight: a drafter
    that shares the target's vocabulary and agrees with it often, but not always."""
    import copy

    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(torch.randn(p.shape, generator=g) * std * p.abs().mean())
    return twin.eval()


@dataclass(frozen=True)
class ContextDependence:
    """How much the next-token law depends on context: ``tv`` (distance ``d`` -> mean total variation
    when only the token ``d`` back differs; ``d = 1`` is the last), ``position_tv`` (the last token's
    position id moved by one) and ``entropy`` (mean, nats)."""

    tv: dict
    position_tv: float
    entropy: float


@torch.no_grad()
def context_dependence(model, *, distances: Sequence[int] = (1, 2, 3, 4), context: int = 8, samples: int = 300,
                       seed: int = 0) -> ContextDependence:
    """:class:`ContextDependence` over ``samples`` random contexts of ``context`` tokens, each against
    a twin differing at one position."""
    vocab = int(model.get_output_embeddings().weight.shape[0])
    g = torch.Generator().manual_seed(seed)

    def law(ids, positions=None):
        return torch.softmax(model(input_ids=ids, position_ids=positions).logits[:, -1].double(), -1)

    def mean_tv(a, b):
        return float(0.5 * (a - b).abs().sum(-1).mean())

    tv = {}
    for d in distances:
        base = torch.randint(0, vocab, (samples, context), generator=g)
        twin = base.clone()
        twin[:, context - d] = (base[:, context - d] + torch.randint(1, vocab, (samples,), generator=g)) % vocab
        tv[int(d)] = mean_tv(law(base), law(twin))
    ids = torch.randint(0, vocab, (samples, context), generator=g)
    positions = torch.arange(context).expand(samples, context)
    gap = positions.clone()
    gap[:, -1] += 1
    p = law(ids, positions)
    entropy = float(-(p * p.clamp_min(1e-300).log()).sum(-1).mean())
    return ContextDependence(tv, mean_tv(p, law(ids, gap)), entropy)
