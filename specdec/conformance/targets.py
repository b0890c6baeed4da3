"""Tiny Hugging Face targets whose next-token law depends on the whole context.

A statistical test can only see a bug that changes the law it measures. Bugs in KV compaction or
in position ids corrupt what the model reads about *older* tokens, so they are visible only on a
target whose next-token law moves when an older token (or its position) changes. A random tiny
Llama is nearly a bigram model: its attention is almost uniform and the residual stream carries
mostly the last token's embedding, so changing the token two back moves the next-token law by a
total variation of about 0.02, and shifting a position by one moves it by 1e-4
(:func:`context_dependence` measures both; docs/exactness.md has the numbers).

:func:`context_target` builds a Llama (it runs through :class:`~specdec.verify.hf.HFTarget` like
any Llama) with a small vocabulary, so that exact laws of a few tokens can be enumerated, and with
scaled weights that make the law depend on the whole context:

* query/key weights scaled up: sharp attention whose pattern depends on relative positions (RoPE),
  so a token's position matters, not only its identity;
* value/output weights scaled up: the attention output dominates the residual stream, so older
  tokens move the law as much as the last one;
* the LM head scaled so the law is peaked but far from a point mass (mean entropy 1.1 nats of the
  ``log 8 = 2.08`` possible).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


def context_target(vocab: int = 8, *, hidden: int = 16, layers: int = 2, heads: int = 2, kv_heads: int = 1,
                   qk_scale: float = 30.0, vo_scale: float = 20.0, lm_scale: float = 25.0, seed: int = 0):
    """A random fp32 Llama in eval mode whose next-token law depends strongly on the whole context.

    The defaults give (:func:`context_dependence`, 300 random 8-token contexts): mean total
    variation 0.27 / 0.28 / 0.28 between laws after contexts that differ only 2 / 3 / 4 tokens
    back, 0.29 when the last token's position moves by one, mean entropy 1.11 nats (the old
    ``tiny_model("llama", vocab_size=8, hidden_size=16, heads=2, kv_heads=1, seed=3)``: 0.023 /
    0.026 / 0.023, 9e-5 and 1.94). Built under a forked RNG:
    the caller's global torch seed is left as it was.
    """
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
    """How much a model's next-token law depends on its context.

    Attributes:
        tv: distance ``d`` -> mean total variation between the laws after two contexts that differ
            only in the token ``d`` back (``d = 1`` is the last token).
        position_tv: mean total variation when the last token's position id moves by one (a gap
            before it), what a position-id bug does to a tree node.
        entropy: mean entropy (nats) of the law after a random context.
    """

    tv: dict
    position_tv: float
    entropy: float


@torch.no_grad()
def context_dependence(model, *, distances: Sequence[int] = (1, 2, 3, 4), context: int = 8, samples: int = 300,
                       seed: int = 0) -> ContextDependence:
    """Measure :class:`ContextDependence` on ``samples`` uniformly random contexts of ``context`` tokens.

    For distance ``d`` each context gets a twin with token ``context - d`` replaced by a different
    uniformly random token; the laws are the softmax of the last position's logits.
    """
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
