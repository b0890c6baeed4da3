"""A learnable synthetic feature cache for the KD trainers' tests (test_heads.py, test_drafter_training.py)."""

import torch

from specdec.training.features import FeatureSet


def synthetic_cache(n_seqs=30, length=20, V=24, H=32, k=4, seed=0):
    """``(FeatureSet, lm_weight [V, H])`` that a KD trainer can learn.

    Tokens follow a fixed permutation (``x_{t+1} = perm[x_t]``), ``final[t]`` encodes ``x_t`` and
    ``x_{t+1}`` (so a Medusa head can tell every later token), and the cached target distribution at
    ``t`` puts 0.7 on ``x_{t+1}`` (teacher forcing is then greedy decoding) and 0.1 on each of ``k - 1``
    random other tokens. The first 4 tokens of each sequence are prompt (no loss); ``fused`` is empty.
    """
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(V, generator=g)
    emb = torch.randn(V, H, generator=g)
    seqs = []
    for _ in range(n_seqs):
        x = [int(torch.randint(V, (1,), generator=g))]
        for _ in range(length - 1):
            x.append(int(perm[x[-1]]))
        seqs.append(x)
    tokens = torch.tensor(seqs).reshape(-1)
    nxt = perm[tokens]  # x_{t+1} (past a sequence's end too: a label the trainers must not read there)
    scores = torch.rand(tokens.numel(), V, generator=g)
    scores[torch.arange(tokens.numel()), nxt] = 2.0  # sorts last: never one of the others
    others = scores.argsort(1)[:, : k - 1]
    topk_ids = torch.cat([nxt[:, None], others], 1)
    topk_p = torch.tensor([0.7] + [0.3 / (k - 1)] * (k - 1)).expand(tokens.numel(), k).half()
    assistant = torch.tensor(([False] * 4 + [True] * (length - 4)) * n_seqs)
    final = (emb[tokens] + emb[nxt]).half()
    data = FeatureSet(final.new_zeros(tokens.numel(), 0), final, tokens, assistant, topk_ids, topk_p,
                      torch.arange(0, tokens.numel() + 1, length))
    return data, torch.randn(V, H, generator=g)
