"""Medusa heads distilled from the target's own distributions on the teacher-forced feature cache.

Head ``i`` reads the final post-norm hidden state ``h_t`` and learns the target's distribution at
position ``t + i + 1`` (the token ``t + i + 2``), from the cached top-k (:mod:`.distill`), instead of
the dataset's token there: on fixed conversations the two differ, and only the target's choice is
accepted. Loss positions are those whose label token is assistant text. Rank accuracies (what the
static tree is built from) count the target's argmax at ``t + i + 1`` as the right token, on
held-out *greedy windows*: positions where the tokens between ``t`` and the label are the target's
own argmax, i.e. where teacher forcing is what greedy decoding would have fed.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import torch

from ..proposers.heads import MedusaHeads
from .distill import reduced_table, soft_targets
from .eagle3 import _first_tokens, split
from .features import FeatureSet
from .loop import cosine_schedule, optimizer_step
from .medusa import HeadsTrainConfig, reduced_vocabulary


def _rows(data: FeatureSet, seqs) -> torch.Tensor:
    return torch.cat([torch.arange(*data.span(i)) for i in seqs]) if seqs else torch.zeros(0, dtype=torch.long)


def _labels(data: FeatureSet, rows: torch.Tensor, k: int):
    """Per head ``i``: the label row ``rows + i + 1`` (clamped) and whether it is in the same
    sequence and its token is assistant text. Returns ``(label_rows [k, n], valid [k, n])``."""
    seq_end = torch.bucketize(rows, data.offsets[1:], right=True)  # sequence index of each row
    end = data.offsets[1:][seq_end]
    lab = torch.stack([rows + i + 1 for i in range(k)])
    valid = (lab < end) & data.assistant[lab.clamp(max=data.tokens.numel() - 1)]
    return lab.clamp(max=data.tokens.numel() - 1), valid


def kd_loss(heads: MedusaHeads, hidden: torch.Tensor, label_ids: torch.Tensor, label_p: torch.Tensor,
            valid: torch.Tensor, table: torch.Tensor, lm_weight: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The training loss of one batch: per head, the mean KD cross-entropy over its valid rows, then
    the ``weights``-weighted mean over heads. ``hidden [n, H]`` (final states), ``label_ids /
    label_p [k, n, top_k]`` (the target's top-k at each head's label position), ``valid [k, n]``.
    The cached trainer and the online one (:mod:`.online`) both step on it."""
    logp = torch.log_softmax(heads(hidden.float(), lm_weight).float(), -1)
    index, weight, ok = soft_targets(label_ids, label_p, table)
    use = valid & ok
    ce = (-(weight * logp.gather(-1, index)).sum(-1) * use).sum(1) / use.sum(1).clamp(min=1)
    weights = weights.to(ce.device)
    return (ce * weights).sum() / weights.sum()


@torch.no_grad()
def evaluate(heads: MedusaHeads, data: FeatureSet, rows: torch.Tensor, lm_weight: torch.Tensor, max_rank: int,
             batch: int = 2048) -> dict:
    """Held-out KD cross-entropy per head, and rank accuracies against the target's argmax on greedy windows."""
    k, V = heads.num_heads, lm_weight.shape[0]
    table = reduced_table(heads.vocab_ids, V, lm_weight.device)
    lab, valid = _labels(data, rows, k)
    argmax = data.topk_ids[:, 0]
    # greedy window for head i: tokens t+1 .. t+i+1 are the target's argmax at t .. t+i
    greedy = torch.ones_like(valid)
    dev = rows.device
    ok_prev = torch.ones(rows.shape, dtype=torch.bool, device=dev)
    for i in range(k):
        nxt = (rows + i + 1).clamp(max=data.tokens.numel() - 1)
        ok_prev = ok_prev & (data.tokens[nxt] == argmax[(rows + i).clamp(max=data.tokens.numel() - 1)])
        greedy[i] = ok_prev & valid[i]
    ce = torch.zeros(k, dtype=torch.float64, device=dev)
    n = torch.zeros(k, dtype=torch.float64, device=dev)
    hits = torch.zeros(k, max_rank, dtype=torch.float64, device=dev)
    count = torch.zeros(k, dtype=torch.float64, device=dev)
    for s in range(0, rows.numel(), batch):
        r = slice(s, s + batch)
        logp = torch.log_softmax(heads(data.final[rows[r]].float(), lm_weight).float(), -1)  # [k, b, R]
        ids, p = data.topk_ids[lab[:, r]], data.topk_p[lab[:, r]]
        index, weight, ok = soft_targets(ids, p, table)
        use = valid[:, r] & ok
        ce += (-(weight * logp.gather(-1, index)).sum(-1) * use).sum(1).double()
        n += use.sum(1).double()
        top = heads.token_ids(torch.topk(logp, min(max_rank, logp.shape[-1]), -1).indices)  # [k, b, m]
        g = greedy[:, r]
        match = (top == argmax[lab[:, r]].unsqueeze(-1)) & g.unsqueeze(-1)
        hits[:, : top.shape[-1]] += match.sum(1).double()
        count += g.sum(1).double()
    rank_acc = (hits / count.clamp(min=1).unsqueeze(1)).tolist()
    return {"ce": [round(float(x), 4) for x in ce / n.clamp(min=1)], "top1": [round(r[0], 4) for r in rank_acc],
            "rank_acc": rank_acc, "positions": int(n[0]), "greedy_windows": [int(c) for c in count]}


def train_medusa_kd(data: FeatureSet, lm_weight: torch.Tensor, cfg: HeadsTrainConfig, *, heldout_every: int = 10,
                    max_train_tokens: int | None = None, progress: bool = True) -> tuple[MedusaHeads, dict]:
    """Heads trained by KD on the non-held-out sequences; ``(heads, report)`` (report -> manifest)."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    V, H = lm_weight.shape
    lm_weight = lm_weight.detach().float()
    train, held = split(data, heldout_every)
    if max_train_tokens is not None:
        train = _first_tokens(data, train, max_train_tokens)
    train_rows, held_rows = _rows(data, train), _rows(data, held)
    if train_rows.numel() == 0 or held_rows.numel() == 0:
        raise ValueError(f"need training and held-out sequences, got {len(train)} and {len(held)}")
    lab, valid = _labels(data, train_rows, cfg.num_heads)
    keep = valid[0]
    train_rows, lab, valid = train_rows[keep], lab[:, keep], valid[:, keep]
    vocab_ids = reduced_vocabulary(data.topk_ids[lab[0], 0], cfg.reduced_vocab, V)
    heads = MedusaHeads(H, cfg.num_heads, cfg.num_layers, vocab_ids).to(lm_weight.device)
    table = reduced_table(vocab_ids, V, lm_weight.device)
    weights = torch.tensor([cfg.head_decay ** i for i in range(cfg.num_heads)])
    opt = torch.optim.AdamW(heads.parameters(), lr=cfg.lr, weight_decay=0.0)
    per_epoch = -(-train_rows.numel() // cfg.batch_size)
    sched = cosine_schedule(opt, per_epoch * cfg.epochs)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=per_epoch * cfg.epochs, desc="medusa heads (KD)", unit="step")
    t0, losses = time.time(), []
    heads.train()
    for epoch in range(cfg.epochs):
        order = torch.randperm(train_rows.numel(), generator=gen)
        for s in range(0, order.numel(), cfg.batch_size):
            o = order[s: s + cfg.batch_size]
            loss = kd_loss(heads, data.final[train_rows[o]], data.topk_ids[lab[:, o]], data.topk_p[lab[:, o]],
                           valid[:, o], table, lm_weight, weights)
            optimizer_step(loss, opt, sched, losses, bar, window=20, epoch=epoch)
    if bar is not None:
        bar.close()
    heads.eval()
    report = {"config": asdict(cfg), "labels": "target top-k distribution (KD)", "train_sequences": len(train),
              "train_tokens": int(sum(data.span(i)[1] - data.span(i)[0] for i in train)),
              "train_rows": int(train_rows.numel()), "train_seconds": round(time.time() - t0, 1),
              "train_loss_last": round(sum(losses[-20:]) / max(len(losses[-20:]), 1), 4),
              "heldout": evaluate(heads, data, held_rows, lm_weight, cfg.max_rank), "heldout_every": heldout_every}
    return heads, report


def unmeasured_heads(heldout: dict) -> list[int]:
    """Heads whose held-out set had no greedy window (a position where the data token is the one the
    target would emit): their rank accuracies read 0, not measured, and a static tree built from them
    (``proposers.heads.static_tree``) never branches there, so such an artifact drafts nothing."""
    return [d for d, c in enumerate(heldout.get("greedy_windows", [])) if c == 0]
