"""The distilled drafter trained by knowledge distillation on the target's cached distributions.

Same drafter as :mod:`.drafter` (a few target layers, the target's embeddings and LM head shared
and frozen), but the label at every position is the target's own next-token distribution (top-k
from the feature cache, renormalised: :func:`.distill.kd_loss`) rather than one token, and the data
is the teacher-forced cache (ShareGPT conversations, self-distilled answers). Loss positions are
those whose next token is assistant text. Held-out metrics: KD cross-entropy and top-1 agreement
with the target's argmax.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Sequence

import torch

from .distill import kd_loss
from .distilled_drafter import DrafterTrainConfig, _is_shared
from .eagle3 import _first_tokens, batches, split
from .features import FeatureSet
from .loop import cosine_schedule, optimizer_step


def _batch(data: FeatureSet, idx: Sequence[int], device):
    spans = [data.span(i) for i in idx]
    T = max(b - a for a, b in spans)
    ids = torch.zeros(len(idx), T, dtype=torch.long)
    attn = torch.zeros(len(idx), T, dtype=torch.long)
    use = torch.zeros(len(idx), T, dtype=torch.bool)
    rows = torch.zeros(len(idx), T, dtype=torch.long)
    for b, (s, e) in enumerate(spans):
        ids[b, : e - s] = data.tokens[s:e]
        attn[b, : e - s] = 1
        use[b, : e - s] = data.assistant[s:e]
        rows[b, : e - s] = torch.arange(s, e)
    return ids.to(device), attn.to(device), use.to(device), rows[use].to(device)


def _loss(drafter, data: FeatureSet, idx, device):
    """``(mean KD loss, hits, positions)``; logits only at loss positions (the LM head is the cost)."""
    ids, attn, use, rows = _batch(data, idx, device)
    hidden = drafter.get_decoder()(input_ids=ids, attention_mask=attn).last_hidden_state[use]
    logits = drafter.get_output_embeddings()(hidden)
    top_ids, top_p = data.topk_ids[rows.cpu()].to(device), data.topk_p[rows.cpu()].to(device)
    ce = kd_loss(logits, top_ids, top_p)
    hits = int((logits.argmax(-1) == top_ids[:, 0]).sum())
    return ce.mean(), hits, int(use.sum())


@torch.no_grad()
def evaluate(drafter, data: FeatureSet, idx: Sequence[int], batch_tokens: int) -> dict:
    dev = next(drafter.parameters()).device
    ce_sum = hits = n = 0
    for group in batches(data, idx, batch_tokens):
        ce, h, m = _loss(drafter, data, group, dev)
        ce_sum, hits, n = ce_sum + float(ce) * m, hits + h, n + m
    return {"kd_ce": round(ce_sum / max(n, 1), 4), "top1": round(hits / max(n, 1), 4), "positions": n}


def train_drafter_kd(drafter, data: FeatureSet, cfg: DrafterTrainConfig, *, heldout_every: int = 10,
                     batch_tokens: int = 2048, max_train_tokens: int | None = None, progress: bool = True) -> dict:
    """Distil the cached distributions into ``drafter`` (shared tensors frozen); returns the report."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    train, held = split(data, heldout_every)
    if max_train_tokens is not None:
        train = _first_tokens(data, train, max_train_tokens)
    if not train or not held:
        raise ValueError(f"need training and held-out sequences, got {len(train)} and {len(held)}")
    params = [p for n, p in drafter.named_parameters() if not _is_shared(n)]
    for n, p in drafter.named_parameters():
        p.requires_grad_(not _is_shared(n))
    groups = batches(data, train, batch_tokens)
    total = len(groups) * cfg.epochs
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    sched = cosine_schedule(opt, total)
    before = evaluate(drafter.eval(), data, held, batch_tokens)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="drafter (KD)", unit="step")
    dev = next(drafter.parameters()).device
    t0, losses = time.time(), []
    drafter.train()
    for epoch in range(cfg.epochs):
        for g in torch.randperm(len(groups), generator=gen).tolist():
            loss, _, _ = _loss(drafter, data, groups[g], dev)
            optimizer_step(loss, opt, sched, losses, bar, window=10, epoch=epoch)
    if bar is not None:
        bar.close()
    drafter.eval()
    for p in drafter.parameters():
        p.requires_grad_(False)
    return {"config": asdict(cfg), "labels": "target top-k distribution (KD)", "train_sequences": len(train),
            "train_tokens": int(sum(data.span(i)[1] - data.span(i)[0] for i in train)),
            "train_seconds": round(time.time() - t0, 1),
            "train_loss_last": round(sum(losses[-10:]) / max(len(losses[-10:]), 1), 4),
            "heldout_before": before, "heldout": evaluate(drafter, data, held, batch_tokens),
            "heldout_every": heldout_every}
