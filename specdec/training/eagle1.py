"""Training the EAGLE draft layer on self-distillation data, in plain torch.

Data: the target's greedy responses with its post-norm hidden state at every position of prompt +
response (the layer attends over the prompt at inference), cached as ``...-full.safetensors``. Loss
(EAGLE-1): from ``(f_t, e_{t+1})`` predict ``f_{t+1}``; ``smooth_l1(pred, f_{t+1}) + ce_weight *
CE(q_t, softmax(lm_rows @ pred))`` with soft labels ``q_t = softmax(lm_rows @ f_{t+1})`` over the
drafting vocabulary (``soft_labels=False``: hard label ``x_{t+2}``). Prompt positions train too by
default (``prompt_loss``); held-out metrics count response positions only. Input features get
Gaussian noise (``noise`` x RMS) because deeper draft levels read the layer's own predictions. Prompts
are cut to their last ``context`` tokens in training only. Measurements: docs/proposers/eagle.md.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import torch
from torch.nn import functional as F

from ..proposers.eagle_layer import EagleConfig, EagleLayer
from .data import DEFAULT_CACHE_DIR, cache_paths, final_hidden_states
from .loop import cosine_schedule, is_heldout, optimizer_step
from .medusa import reduced_vocabulary


@dataclass
class EagleTrainConfig:
    """Hyper-parameters (all recorded in the artifact manifest)."""

    reduced_vocab: int = 8192  # 0 = draft over the full vocabulary
    epochs: int = 10
    lr: float = 2e-3
    batch_size: int = 8  # records per step
    context: int = 256  # prompt tokens kept before the response in training
    ce_weight: float = 0.5
    noise: float = 0.05  # input-feature noise std as a fraction of the feature RMS
    soft_labels: bool = True  # CE against the target's own distribution (reduced vocab) instead of its token
    prompt_loss: bool = True  # also learn from the kept prompt positions (target features on user text)
    warmup: int = 20  # linear warm-up steps before the cosine decay
    seed: int = 0

    def __post_init__(self):
        for name in ("epochs", "batch_size", "context"):
            if getattr(self, name) < 1:
                raise ValueError(f"EagleTrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.reduced_vocab < 0:
            raise ValueError(f"reduced_vocab must be >= 0 (0 = full vocabulary), got {self.reduced_vocab}")
        if not self.lr > 0 or self.ce_weight < 0 or self.noise < 0 or self.warmup < 0:
            raise ValueError(f"need lr > 0, ce_weight >= 0, noise >= 0, warmup >= 0, got "
                             f"{self.lr}, {self.ce_weight}, {self.noise}, {self.warmup}")


@dataclass
class FullSequences:
    """Every record's prompt + response with hidden states: ``records``, ``hidden`` float16 ``[N, H]``
    (record ``i`` at ``offsets[i]:offsets[i+1]``), ``tokens`` long ``[N]``, ``offsets`` long ``[n + 1]``."""

    records: list[dict]
    hidden: torch.Tensor
    tokens: torch.Tensor
    offsets: torch.Tensor

    def sequence(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """``(hidden [L, H], tokens [L], prompt length P)`` of record ``i``."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.hidden[a:b], self.tokens[a:b], len(self.records[i]["prompt_ids"])

    def heldout(self, every: int = 10) -> list[int]:
        """Every ``every``-th prompt-file record (:func:`~.loop.is_heldout`); synthetic records always train."""
        return [i for i, r in enumerate(self.records)
                if r.get("source", "prompts") == "prompts" and is_heldout(i, every)]

    def extended(self, other: "FullSequences") -> "FullSequences":
        """These records then ``other``'s (synthetic only, so the held-out split is unchanged)."""
        if any(r.get("source") != "synthetic" for r in other.records):
            raise ValueError("only synthetic records can extend a data set (others would shift the held-out split)")
        return FullSequences(self.records + list(other.records), torch.cat([self.hidden, other.hidden]),
                             torch.cat([self.tokens, other.tokens]),
                             torch.cat([self.offsets, other.offsets[1:] + self.offsets[-1]]))


def full_cache_path(cache_dir: str, target_fp: str, n: int, max_new_tokens: int) -> str:
    return cache_paths(cache_dir, target_fp, n, max_new_tokens)[0][: -len(".jsonl")] + "-full.safetensors"


def build_full(model, records: Sequence[dict], progress: Callable[[str, int, int], None] | None = None
               ) -> FullSequences:
    """One teacher-forced target forward per record over prompt + response."""
    hidden, tokens, offsets = [], [], [0]
    for i, rec in enumerate(records):
        p, r = rec["prompt_ids"], rec["response_ids"]
        if not p or not r:
            raise ValueError(f"record {i} (question {rec.get('question_id')}) has an empty prompt or response")
        seq = list(p) + list(r)
        hidden.append(final_hidden_states(model, seq).half().cpu())
        tokens.append(torch.tensor(seq))
        offsets.append(offsets[-1] + len(seq))
        if progress:
            progress("hidden (full sequences)", i + 1, len(records))
    return FullSequences(list(records), torch.cat(hidden), torch.cat(tokens).long(), torch.tensor(offsets))


def load_or_build_full(model, records: Sequence[dict], *, target_fp: str, n_prompts: int, max_new_tokens: int,
                       cache_dir: str = DEFAULT_CACHE_DIR, progress=None) -> tuple[FullSequences, str]:
    """Full-sequence hidden states for these records (cached by target fingerprint); ``(data, source)``."""
    from safetensors.torch import load_file, save_file

    path = full_cache_path(cache_dir, target_fp, n_prompts, max_new_tokens)
    if os.path.isfile(path):
        t = load_file(path)
        if int(t["offsets"].numel()) == len(records) + 1:
            return FullSequences(list(records), t["hidden"], t["tokens"], t["offsets"]), "cached"
    data = build_full(model, records, progress)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    save_file({"hidden": data.hidden, "tokens": data.tokens, "offsets": data.offsets}, path + ".tmp")
    os.replace(path + ".tmp", path)
    return data, "computed"


def _reduced_table(vocab_ids: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """``LongTensor[V]``: token id -> drafting-vocabulary index, ``-1`` outside it."""
    if vocab_ids is None:
        return torch.arange(vocab_size)
    table = torch.full((vocab_size,), -1, dtype=torch.long)
    table[vocab_ids] = torch.arange(vocab_ids.numel())
    return table


def _batch(data: FullSequences, idx: Sequence[int], context: int, embed: torch.Tensor, table: torch.Tensor):
    """``(feats, embeds, target feats [B, T, H], labels [B, T], response mask, valid mask [B, T])`` for
    records ``idx`` (prompts cut to ``context``; response mask: positions ``t >= P - 2`` with a label)."""
    seqs = []
    for i in idx:
        h, tok, P = data.sequence(i)
        s = max(0, P - context)
        seqs.append((h[s:], tok[s:], P - s))
    T = max(len(t) for _, t, _ in seqs) - 1
    B, H = len(seqs), data.hidden.shape[1]
    feats = torch.zeros(B, T, H)
    target = torch.zeros(B, T, H)
    toks = torch.zeros(B, T, dtype=torch.long)
    labels = torch.full((B, T), -1, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.bool)
    valid = torch.zeros(B, T, dtype=torch.bool)
    for b, (h, tok, P) in enumerate(seqs):
        L = len(tok) - 1  # pairs (h_t, x_{t+1}) for t < L
        feats[b, :L] = h[:L].float()
        target[b, :L] = h[1: L + 1].float()
        toks[b, :L] = tok[1: L + 1]
        labels[b, : L - 1] = table[tok[2: L + 1]]
        mask[b, max(0, P - 2): L - 1] = True
        valid[b, :L] = True
    dev = embed.device
    return feats.to(dev), embed[toks.to(dev)], target.to(dev), labels.to(dev), mask.to(dev), valid.to(dev)


def _losses(layer: EagleLayer, rows: torch.Tensor, feats, embeds, target, labels, mask, ce_weight: float,
            soft: bool):
    """``(total, feature loss sum, ce sum, hits, count)`` over ``mask``; ``soft``: CE against
    ``softmax(rows @ f_{t+1})``, else the hard label (out-of-vocabulary labels add no CE); ``hits``
    counts argmax == hard label."""
    pred = layer(feats, embeds)[mask]  # [n, H]
    lab = labels[mask]
    tgt = target[mask]
    feat_loss = F.smooth_l1_loss(pred, tgt, reduction="none").mean(-1)
    logits = pred @ rows.T
    ok = lab >= 0
    if soft:
        with torch.no_grad():
            q = torch.softmax(tgt @ rows.T, -1)
        ce = -(q * torch.log_softmax(logits, -1)).sum(-1)
    else:
        ce = F.cross_entropy(logits, lab.clamp(min=0), reduction="none") * ok
    hits = ((logits.argmax(-1) == lab) & ok).sum()
    n = max(int(mask.sum()), 1)
    total = feat_loss.sum() / n + ce_weight * ce.sum() / n
    return total, feat_loss.sum(), ce.sum(), hits, int(mask.sum())


@torch.no_grad()
def evaluate(layer: EagleLayer, data: FullSequences, records: Sequence[int], embed: torch.Tensor,
             lm_weight: torch.Tensor, cfg: EagleTrainConfig) -> dict:
    """Teacher-forced held-out metrics on response positions: feature smooth-L1, CE (as trained),
    total loss and next-token top-1."""
    layer.eval()
    rows = layer.lm_rows(lm_weight)
    table = _reduced_table(None if layer.vocab_ids is None else layer.vocab_ids.cpu(), lm_weight.shape[0])
    fl = ce = hits = n = 0.0
    for s in range(0, len(records), cfg.batch_size):
        feats, embeds, target, labels, mask, _ = _batch(data, records[s: s + cfg.batch_size], cfg.context, embed, table)
        _, a, b, c, d = _losses(layer, rows, feats, embeds, target, labels, mask, cfg.ce_weight, cfg.soft_labels)
        fl, ce, hits, n = fl + float(a), ce + float(b), hits + float(c), n + d
    n = max(n, 1)
    return {"feature_loss": round(fl / n, 5), "ce": round(ce / n, 5), "loss": round((fl + cfg.ce_weight * ce) / n, 5),
            "top1": round(hits / n, 5), "positions": int(n), "records": len(records)}


def train_eagle(data: FullSequences, embed: torch.Tensor, lm_weight: torch.Tensor, layer_config: EagleConfig,
                cfg: EagleTrainConfig, *, heldout_every: int = 10, progress: bool = True) -> tuple[EagleLayer, dict]:
    """Train the draft layer on the non-held-out records; returns ``(layer, report)`` (report -> manifest)."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    V = lm_weight.shape[0]
    embed, lm_weight = embed.detach().float(), lm_weight.detach().float()
    held = data.heldout(heldout_every)
    held_set = set(held)
    train = [i for i in range(len(data.records)) if i not in held_set]
    if not train or not held:
        raise ValueError(f"need training and held-out records, got {len(train)} and {len(held)}")
    train_tokens = torch.cat([tok[P:] for _, tok, P in map(data.sequence, train)])
    vocab_ids = reduced_vocabulary(train_tokens, cfg.reduced_vocab, V)
    layer = EagleLayer(layer_config, vocab_ids).to(lm_weight.device)
    table = _reduced_table(vocab_ids, V)
    rows = layer.lm_rows(lm_weight)
    before = evaluate(layer, data, held, embed, lm_weight, cfg)
    rms = float(data.hidden[:100000].float().pow(2).mean().sqrt())
    # Similar lengths batch together (less padding); batches are shuffled every epoch.
    by_len = sorted(train, key=lambda i: (int(data.offsets[i + 1] - data.offsets[i]), i))
    batches = [by_len[s: s + cfg.batch_size] for s in range(0, len(by_len), cfg.batch_size)]
    total = len(batches) * cfg.epochs
    opt = torch.optim.AdamW(layer.parameters(), lr=cfg.lr, weight_decay=0.0)
    warm = min(cfg.warmup, total // 10)
    sched = cosine_schedule(opt, total, warm)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="eagle layer", unit="step")
    t0 = time.time()
    losses: list[float] = []
    for epoch in range(cfg.epochs):
        layer.train()
        for j in torch.randperm(len(batches), generator=gen).tolist():
            feats, embeds, target, labels, mask, valid = _batch(data, batches[j], cfg.context, embed, table)
            if cfg.noise:
                feats = feats + (torch.randn(feats.shape, generator=gen) * (cfg.noise * rms)).to(feats.device)
            use = valid if cfg.prompt_loss else mask
            loss = _losses(layer, rows, feats, embeds, target, labels, use, cfg.ce_weight, cfg.soft_labels)[0]
            optimizer_step(loss, opt, sched, losses, bar, window=20, epoch=epoch)
    if bar is not None:
        bar.close()
    layer.eval()
    report = {
        "config": asdict(cfg),
        "train_records": len(train),
        "train_loss_last": round(sum(losses[-20:]) / len(losses[-20:]), 5),
        "train_seconds": round(time.time() - t0, 1),
        "steps": total,
        "heldout_before": before,
        "heldout": evaluate(layer, data, held, embed, lm_weight, cfg),
        "heldout_every": heldout_every,
        "feature_rms": round(rms, 4),
    }
    return layer, report
