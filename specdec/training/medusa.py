"""Training Medusa heads on self-distillation data, in plain torch.

Head ``i`` learns the token ``i + 2`` positions after each hidden state of the target's own greedy
output (what greedy verification accepts), through the frozen shared LM head; with a reduced vocabulary
the softmax covers those ``R`` tokens, as in drafting. Held-out evaluation gives per head the CE, top-1
and the rank accuracies ``acc[d][r]`` that shape the static tree.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
from torch import nn

from ..proposers.heads import MedusaHeads
from .data import SelfDistillation
from .loop import cosine_schedule, is_heldout, optimizer_step


@dataclass
class HeadsTrainConfig:
    """Hyper-parameters (all recorded in the artifact manifest)."""

    num_heads: int = 4
    num_layers: int = 1
    reduced_vocab: int = 8192  # 0 = score the full vocabulary
    epochs: int = 2
    lr: float = 1e-3
    batch_size: int = 256
    seed: int = 0
    max_rank: int = 10  # ranks kept in rank_acc (the widest a static tree can branch)
    head_decay: float = 0.8  # loss weight of head i is head_decay ** i (later heads are harder)

    def __post_init__(self):
        for name in ("num_heads", "num_layers", "epochs", "batch_size", "max_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"HeadsTrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.reduced_vocab < 0:
            raise ValueError(f"reduced_vocab must be >= 0 (0 = full vocabulary), got {self.reduced_vocab}")
        if not self.lr > 0 or not 0 < self.head_decay <= 1:
            raise ValueError(f"need lr > 0 and 0 < head_decay <= 1, got {self.lr}, {self.head_decay}")


def reduced_vocabulary(tokens: torch.Tensor, size: int, vocab_size: int) -> torch.Tensor | None:
    """The ``size`` most frequent ids in ``tokens`` (ties toward lower id), padded with the lowest
    unused ids when fewer distinct tokens occur; None when ``size`` is 0 or covers the vocabulary."""
    if size == 0 or size >= vocab_size:
        return None
    counts = torch.bincount(tokens.long(), minlength=vocab_size).double()
    counts -= torch.arange(vocab_size, dtype=torch.float64) / (2 * vocab_size)  # stable tie-break by id
    return torch.topk(counts, size).indices.sort().values


def head_targets(data: SelfDistillation, num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(targets [k, N], valid [k, N])``: head ``i``'s label for each row is ``i + 2`` positions ahead."""
    pairs = [data.next_tokens(i + 2) for i in range(num_heads)]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def record_split_mask(data: SelfDistillation, heldout_every: int = 10) -> torch.Tensor:
    """``bool [N]``: rows of held-out records (every ``heldout_every``-th prompt-file record)."""
    from_prompts = torch.tensor([r.get("source", "prompts") == "prompts" for r in data.records], dtype=torch.bool)
    return is_heldout(data.record, heldout_every) & from_prompts[data.record]


def rows_from_full(full) -> SelfDistillation:
    """Medusa's rows (last prompt position and every response position) out of full-sequence features
    (:class:`~.eagle.FullSequences`), so both trainers share one teacher-forced pass."""
    keep, record = [], []
    for i, rec in enumerate(full.records):
        a, b = int(full.offsets[i]), int(full.offsets[i + 1])
        lo = a + len(rec["prompt_ids"]) - 1
        keep.append(torch.arange(lo, b))
        record.append(torch.full((b - lo,), i))
    idx = torch.cat(keep)
    return SelfDistillation(list(full.records), full.hidden[idx], full.tokens[idx], torch.cat(record).long())


def _to_reduced(targets: torch.Tensor, vocab_ids: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """Token ids -> drafting-vocabulary indices, ``-1`` where the token is not in it."""
    if vocab_ids is None:
        return targets.clone()
    table = torch.full((vocab_size,), -1, dtype=torch.long)
    table[vocab_ids] = torch.arange(vocab_ids.numel())
    return table[targets]


def _losses(logits: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-head mean cross-entropy ``[k]`` over rows where ``valid`` and the label is drafting-vocab."""
    k = logits.shape[0]
    use = valid & (labels >= 0)
    ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.clamp(min=0).reshape(-1),
                                     reduction="none").reshape(k, -1)
    return (ce * use).sum(1) / use.sum(1).clamp(min=1)


@torch.no_grad()
def evaluate(heads: MedusaHeads, data: SelfDistillation, rows: torch.Tensor, lm_weight: torch.Tensor,
             max_rank: int, batch_size: int = 512) -> dict:
    """Held-out loss, top-1 accuracy and rank accuracies per head on ``rows`` (indices into data)."""
    k = heads.num_heads
    targets, valid = head_targets(data, k)
    vocab_ids = None if heads.vocab_ids is None else heads.vocab_ids.cpu()
    labels = _to_reduced(targets, vocab_ids, lm_weight.shape[0]).to(lm_weight.device)
    valid = valid.to(lm_weight.device)
    loss_sum = torch.zeros(k, dtype=torch.float64)
    hits = torch.zeros(k, max_rank, dtype=torch.float64)
    count = torch.zeros(k, dtype=torch.float64)
    for s in range(0, rows.numel(), batch_size):
        r = rows[s: s + batch_size]
        logits = heads(data.hidden[r].float(), lm_weight)
        lab, val = labels[:, r], valid[:, r]
        use = val & (lab >= 0)
        ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.clamp(min=0).reshape(-1),
                                         reduction="none").reshape(k, -1)
        loss_sum += (ce * use).sum(1).double().cpu()
        top = torch.topk(logits, min(max_rank, logits.shape[-1]), dim=-1).indices  # [k, b, m]
        match = (top == lab.unsqueeze(-1)) & use.unsqueeze(-1)
        hits[:, : top.shape[-1]] += match.sum(1).double().cpu()
        count += val.sum(1).double().cpu()  # out-of-vocabulary labels count as misses
    scorable = count.clamp(min=1)
    rank_acc = (hits / scorable.unsqueeze(1)).tolist()
    return {
        "loss": [float(x) for x in (loss_sum / scorable)],
        "top1": [row[0] for row in rank_acc],
        "rank_acc": rank_acc,
        "rows": int(rows.numel()),
    }


def train_medusa(data: SelfDistillation, lm_weight: torch.Tensor, cfg: HeadsTrainConfig, *,
                 heldout_every: int = 10, progress: bool = True) -> tuple[MedusaHeads, dict]:
    """Train heads on the non-held-out records; returns ``(heads, report)`` (report -> manifest)."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    V, H = lm_weight.shape
    lm_weight = lm_weight.detach().float()
    held = record_split_mask(data, heldout_every)
    targets, valid = head_targets(data, cfg.num_heads)
    train_rows = (~held & valid[0]).nonzero().flatten()
    held_rows = (held & valid[0]).nonzero().flatten()
    if train_rows.numel() == 0 or held_rows.numel() == 0:
        raise ValueError(f"need training and held-out rows, got {train_rows.numel()} and {held_rows.numel()}")
    train_tokens = data.tokens[~held]
    vocab_ids = reduced_vocabulary(train_tokens, cfg.reduced_vocab, V)
    device = lm_weight.device
    heads = MedusaHeads(H, cfg.num_heads, cfg.num_layers, vocab_ids).to(device)
    labels = _to_reduced(targets, vocab_ids, V).to(device)
    valid = valid.to(device)
    weights = torch.tensor([cfg.head_decay ** i for i in range(cfg.num_heads)], device=device)
    opt = torch.optim.AdamW(heads.parameters(), lr=cfg.lr, weight_decay=0.0)
    steps_per_epoch = math.ceil(train_rows.numel() / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    sched = cosine_schedule(opt, total)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="medusa heads", unit="step")
    t0 = time.time()
    losses = []
    heads.train()
    for epoch in range(cfg.epochs):
        order = train_rows[torch.randperm(train_rows.numel(), generator=gen)]
        for s in range(0, order.numel(), cfg.batch_size):
            r = order[s: s + cfg.batch_size]
            logits = heads(data.hidden[r].float(), lm_weight)
            per_head = _losses(logits, labels[:, r], valid[:, r])
            loss = (per_head * weights).sum() / weights.sum()
            optimizer_step(loss, opt, sched, losses, bar, window=20, epoch=epoch)
    if bar is not None:
        bar.close()
    heads.eval()
    train_s = time.time() - t0
    report = {
        "config": asdict(cfg),
        "train_rows": int(train_rows.numel()),
        "train_loss_last": sum(losses[-20:]) / len(losses[-20:]),
        "train_seconds": round(train_s, 1),
        "heldout": evaluate(heads, data, held_rows, lm_weight, cfg.max_rank),
        "heldout_every": heldout_every,
    }
    return heads, report
