"""Training the EAGLE-3 draft layer on the teacher-forced feature cache, with training-time test.

Data: :class:`~.features.FeatureSet` sequences (ShareGPT conversations and/or self-distilled
answers): fused target features ``F_t``, the tokens, and the target's own top-k next-token
distribution at every position (the label: distillation, not the dataset's next token).

**Training-time test** (EAGLE-3). Index everything by the *anchor* ``t``, the last position whose
true target feature the draft sees. Step 1 is the ordinary teacher-forced pass: position ``t``
reads ``(fc(F_t), e(x_{t+1}))`` and its output ``o_1[t]`` must match the target's distribution at
``t + 1`` (for token ``x_{t+2}``). Step ``j >= 2`` is what drafting depth ``j`` does: it reads the
layer's **own** previous output ``o_{j-1}[t]`` with the token ``x_{t+j}`` at position ``t + j - 1``,
attends to the step-1 keys of positions ``<= t`` (the committed cache) plus its own chain's keys of
steps ``2..j`` (its drafted ancestors), and must match the target's distribution at ``t + j``. So
deeper draft levels are trained on exactly the (imperfect) features they will be fed, instead of
the target's, which is why EAGLE-3 drops EAGLE-1's feature regression and input noise.

Loss per step: cross-entropy of the draft's distribution over the drafting vocabulary against the
target's top-k distribution restricted to it and renormalised, at positions whose next token is
assistant text and whose target argmax lies in the drafting vocabulary (EAGLE-3's mask); step ``j``
weighs ``step_decay ** (j - 1)``. Held-out sequences: every ``heldout_every``-th.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import torch
from torch.nn import functional as F

from ..proposers.eagle3_layer import Eagle3Config, Eagle3Layer
from .distill import reduced_table, soft_targets
from .features import FeatureSet
from .loop import cosine_schedule, is_heldout, optimizer_step
from .medusa import reduced_vocabulary


@dataclass
class Eagle3TrainConfig:
    """Hyper-parameters (all recorded in the artifact manifest)."""

    reduced_vocab: int = 8192
    steps: int = 3  # training-time-test depth k (step 1 = teacher forced, 2..k on own outputs)
    step_decay: float = 0.8
    epochs: int = 1
    lr: float = 1e-3
    batch_tokens: int = 4096  # padded tokens per optimiser step
    warmup: int = 20
    seed: int = 0

    def __post_init__(self):
        for name in ("reduced_vocab", "steps", "epochs", "batch_tokens"):
            if getattr(self, name) < (0 if name == "reduced_vocab" else 1):
                raise ValueError(f"Eagle3TrainConfig.{name} is out of range: {getattr(self, name)}")
        if not self.lr > 0 or not 0 < self.step_decay <= 1 or self.warmup < 0:
            raise ValueError(f"need lr > 0, 0 < step_decay <= 1, warmup >= 0, got {self.lr}, {self.step_decay}, "
                             f"{self.warmup}")


def split(data: FeatureSet, heldout_every: int) -> tuple[list[int], list[int]]:
    """``(train, held-out)`` sequence indices."""
    held = [i for i in range(data.num_sequences) if is_heldout(i, heldout_every)]
    hs = set(held)
    return [i for i in range(data.num_sequences) if i not in hs], held


def batches(data: FeatureSet, idx: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Sequences of similar length together, about ``batch_tokens`` padded tokens per batch."""
    order = sorted(idx, key=lambda i: (data.span(i)[1] - data.span(i)[0], i))
    out, cur, width = [], [], 0
    for i in order:
        n = data.span(i)[1] - data.span(i)[0]
        if cur and max(width, n) * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, n)
    return out + ([cur] if cur else [])


def _pad(data: FeatureSet, idx: Sequence[int], device):
    """``(fused [B, T, F], tokens [B, T], ids [B, T, k], p [B, T, k], assistant [B, T])`` right-padded."""
    spans = [data.span(i) for i in idx]
    T = max(b - a for a, b in spans)
    B, Fw, k = len(idx), data.fused.shape[1], data.topk_ids.shape[1]
    fused = torch.zeros(B, T, Fw)
    tokens = torch.zeros(B, T, dtype=torch.long)
    ids = torch.zeros(B, T, k, dtype=torch.long)
    p = torch.zeros(B, T, k)
    assistant = torch.zeros(B, T, dtype=torch.bool)
    for b, (s, e) in enumerate(spans):
        n = e - s
        fused[b, :n] = data.fused[s:e].float()
        tokens[b, :n] = data.tokens[s:e]
        ids[b, :n] = data.topk_ids[s:e]
        p[b, :n] = data.topk_p[s:e].float()
        assistant[b, :n] = data.assistant[s:e]
    return fused.to(device), tokens.to(device), ids.to(device), p.to(device), assistant.to(device)


def _shift(x: torch.Tensor, j: int, fill=0) -> torch.Tensor:
    """``out[:, t] = x[:, t + j]`` (``fill`` past the end)."""
    if j == 0:
        return x
    pad = torch.full_like(x[:, :j], fill)
    return torch.cat([x[:, j:], pad], 1)


def _chain_attention(layer: Eagle3Layer, q, k1, v1, ks, vs):
    """Step ``j``'s attention (anchor-indexed): ``q [B, T, Hq, D]`` over step-1 keys of anchors
    ``<= t`` (``k1, v1 [B, T, Hkv, D]``) and its own chain's keys ``ks, vs`` (lists of the same
    shape, steps ``2..j``) at the same anchor. Returns ``[B, T, Hq * D]``."""
    g = layer.config.num_heads // layer.config.num_kv_heads
    B, T, Hq, D = q.shape
    rep = lambda t: t.repeat_interleave(g, 2)  # [B, T, Hq, D]
    qh = q.transpose(1, 2)  # [B, Hq, T, D]
    scores = qh @ rep(k1).transpose(1, 2).transpose(-1, -2) / math.sqrt(D)  # [B, Hq, T, T]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    diag = torch.stack([(q * rep(k)).sum(-1) for k in ks], -1).transpose(1, 2) / math.sqrt(D)  # [B, Hq, T, j-1]
    w = torch.softmax(torch.cat([scores, diag], -1), -1)
    out = w[..., :T] @ rep(v1).transpose(1, 2)  # [B, Hq, T, D]
    for i, v in enumerate(vs):
        out = out + w[..., T + i: T + i + 1] * rep(v).transpose(1, 2)
    return out.transpose(1, 2).reshape(B, T, Hq * D)


def unroll(layer: Eagle3Layer, fused, tokens, embed, steps: int) -> list[torch.Tensor]:
    """The training-time-test outputs ``[o_1, ..., o_steps]``, each ``[B, T, H]`` anchor-indexed."""
    T = tokens.shape[1]
    pos = torch.arange(T, device=tokens.device)
    feats = layer.embed_features(fused)
    outs, ks, vs = [], [], []
    k1 = v1 = None
    for j in range(1, steps + 1):
        emb = embed[_shift(tokens, j)]
        x, q, k, v = layer.qkv(feats, emb, pos + (j - 1))
        if j == 1:
            k1, v1 = k, v
            g = layer.config.num_heads // layer.config.num_kv_heads
            attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(g, 2).transpose(1, 2),
                                                  v.repeat_interleave(g, 2).transpose(1, 2), is_causal=True)
            attn = attn.transpose(1, 2).reshape(*q.shape[:2], -1)
        else:
            ks.append(k), vs.append(v)
            attn = _chain_attention(layer, q, k1, v1, ks, vs)
        feats = layer.finish(x, attn)
        outs.append(feats)
    return outs


def step_losses(layer: Eagle3Layer, rows, table, batch, embed, steps: int):
    """Per step ``(ce sum, count, draft argmax == target argmax [B, T] bool, mask [B, T])``."""
    fused, tokens, ids, p, assistant = batch
    out = []
    for j, o in enumerate(unroll(layer, fused, tokens, embed, steps), start=1):
        lid, lp, la = _shift(ids, j), _shift(p, j), _shift(assistant, j, False)
        index, weight, ok = soft_targets(lid, lp, table)
        mask = la & ok
        logits = layer.head_input(o[mask]) @ rows.T
        ce = -(weight[mask] * torch.log_softmax(logits.float(), -1).gather(-1, index[mask])).sum()
        hit = torch.zeros_like(mask)
        hit[mask] = layer.token_ids(logits.argmax(-1)) == lid[mask][:, 0]
        out.append((ce, int(mask.sum()), hit, mask))
    return out


@torch.no_grad()
def evaluate(layer: Eagle3Layer, data: FeatureSet, idx: Sequence[int], embed, lm_weight, cfg: Eagle3TrainConfig
             ) -> dict:
    """Held-out CE and top-1 agreement per step, and the greedy chain length on greedy windows.

    ``chain``: over anchors whose next ``steps`` fed tokens are the target's own argmax (so teacher
    forcing there is what greedy decoding would feed), the mean number of leading steps whose draft
    argmax equals the target's: accepted draft tokens of a ``steps``-long greedy chain.
    """
    layer.eval()
    rows = layer.lm_rows(lm_weight)
    table = reduced_table(layer.vocab_ids, lm_weight.shape[0], lm_weight.device)
    S = cfg.steps
    ce, n, hits = [0.0] * S, [0] * S, [0] * S
    chain_sum = chain_n = 0
    for group in batches(data, idx, cfg.batch_tokens):
        batch = _pad(data, group, lm_weight.device)
        tokens, ids, assistant = batch[1], batch[2], batch[4]
        res = step_losses(layer, rows, table, batch, embed, S)
        greedy = _shift(ids[..., 0], 0) == _shift(tokens, 1)  # token t+1 is the target's argmax at t
        run = torch.ones_like(assistant)
        window = _shift(assistant, 1, False)
        length = torch.zeros(assistant.shape, dtype=torch.long, device=assistant.device)
        for j, (c, m, hit, mask) in enumerate(res, start=1):
            ce[j - 1] += float(c)
            n[j - 1] += m
            hits[j - 1] += int(hit.sum())
            if j >= 2:
                window = window & _shift(greedy, j - 1, False)
            run = run & hit
            length += run.long()
        window = window & _shift(assistant, S, False)
        chain_sum += int(length[window].sum())
        chain_n += int(window.sum())
    return {"ce": [round(c / max(m, 1), 4) for c, m in zip(ce, n)],
            "top1": [round(h / max(m, 1), 4) for h, m in zip(hits, n)], "positions": n[0],
            "chain_accepted": round(chain_sum / max(chain_n, 1), 4), "chain_windows": chain_n,
            "sequences": len(idx)}


def train_eagle3(data: FeatureSet, embed: torch.Tensor, lm_weight: torch.Tensor, final_norm: torch.Tensor,
                 config: Eagle3Config, cfg: Eagle3TrainConfig, *, heldout_every: int = 10, max_train_tokens=None,
                 progress: bool = True) -> tuple[Eagle3Layer, dict]:
    """Train on the non-held-out sequences (at most ``max_train_tokens`` of them, for learning
    curves); returns ``(layer, report)``. ``final_norm`` (the target's final RMSNorm weight)
    initialises the layer's own, so its outputs start on the LM head's scale."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    V, dev = lm_weight.shape[0], lm_weight.device
    embed, lm_weight = embed.detach().float(), lm_weight.detach().float()
    if data.fused.shape[1] != len(config.target_layers) * config.hidden_size:
        raise ValueError(f"features are {data.fused.shape[1]} wide; the layer fuses {len(config.target_layers)} x "
                         f"{config.hidden_size}")
    train, held = split(data, heldout_every)
    if max_train_tokens is not None:
        train = _first_tokens(data, train, max_train_tokens)
    if not train or not held:
        raise ValueError(f"need training and held-out sequences, got {len(train)} and {len(held)}")
    train_pos = torch.cat([torch.arange(*data.span(i)) for i in train])
    argmax = data.topk_ids[train_pos, 0][data.assistant[train_pos]]
    layer = Eagle3Layer(config, reduced_vocabulary(argmax, cfg.reduced_vocab, V)).to(dev)
    layer.final_norm.weight.data.copy_(final_norm.detach().float())
    rows = layer.lm_rows(lm_weight)
    table = reduced_table(layer.vocab_ids, V, dev)
    before = evaluate(layer, data, held, embed, lm_weight, cfg)
    groups = batches(data, train, cfg.batch_tokens)
    total = len(groups) * cfg.epochs
    opt = torch.optim.AdamW(layer.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = cosine_schedule(opt, total, min(cfg.warmup, total // 10))
    weights = [cfg.step_decay ** j for j in range(cfg.steps)]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="eagle-3 layer", unit="step")
    t0, losses = time.time(), []
    for epoch in range(cfg.epochs):
        layer.train()
        for g in torch.randperm(len(groups), generator=gen).tolist():
            res = step_losses(layer, rows, table, _pad(data, groups[g], dev), embed, cfg.steps)
            loss = sum(w * c / max(m, 1) for w, (c, m, _, _) in zip(weights, res)) / sum(weights)
            optimizer_step(loss, opt, sched, losses, bar, window=20, epoch=epoch)
    if bar is not None:
        bar.close()
    layer.eval()
    tokens = int(sum(data.span(i)[1] - data.span(i)[0] for i in train))
    report = {"config": asdict(cfg), "train_sequences": len(train), "train_tokens": tokens,
              "train_assistant_tokens": int(data.assistant[train_pos].sum()),
              "train_seconds": round(time.time() - t0, 1), "steps": total,
              "train_loss_last": round(sum(losses[-20:]) / max(len(losses[-20:]), 1), 4),
              "heldout_before": before, "heldout": evaluate(layer, data, held, embed, lm_weight, cfg),
              "heldout_every": heldout_every}
    return layer, report


def _first_tokens(data: FeatureSet, idx: Sequence[int], budget: int) -> list[int]:
    """The first sequences of ``idx`` (extraction order) within ``budget`` tokens."""
    out, used = [], 0
    for i in idx:
        n = data.span(i)[1] - data.span(i)[0]
        if used + n > budget:
            break
        out.append(i)
        used += n
    return out
