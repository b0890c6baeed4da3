"""Online teacher features: the target's forward runs batch by batch while the drafters train.

Unlike the cached path (:mod:`.features`) nothing is stored: each optimiser step pads a group of
sequences, runs the target over them (:func:`target_batch`: the fused hidden states an EAGLE-3
layer reads, the final state Medusa heads read, the target's top-k as the label) and steps the
EAGLE-3 layer and/or the Medusa heads on that one forward. Memory is one batch of features,
whatever the data size; the price is one target forward per batch and epoch. Both trainers use the
cached trainers' losses (:func:`~specdec.training.eagle3.step_losses`,
:func:`~specdec.training.medusa_kd.kd_loss`) and held-out metrics, on a held-out split held in
memory (``heldout_tokens``). The drafting vocabularies are fixed before the first step from the
training sequences' assistant tokens. Why this path exists: docs/design-notes.md.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, fields
from typing import Callable, Sequence

import torch

from ..proposers.eagle3_layer import Eagle3Config, Eagle3Layer
from ..proposers.heads import MedusaHeads
from .data import decoder_of
from .distill import reduced_table
from .eagle3 import Eagle3TrainConfig, step_losses
from .eagle3 import evaluate as evaluate_eagle3
from .features import FeatureSet, FeatureSpec, TeacherSequence
from .loop import cosine_schedule, is_heldout, optimizer_step
from .medusa import HeadsTrainConfig, reduced_vocabulary
from .medusa_kd import evaluate as evaluate_medusa
from .medusa_kd import kd_loss


@dataclass
class OnlineConfig:
    """How the stream runs (recorded in both manifests).

    ``batch_tokens``: padded tokens per target forward and optimiser step. ``train_tokens``: token
    passes to train on (None = one epoch). ``seconds``: stop stepping after this long.
    ``heldout_every``: every N-th sequence is held out, at most ``heldout_tokens`` evaluated. ``amp``:
    autocast dtype for the drafters' steps on CUDA (None = float32). ``head_chunk``: rows per LM-head
    top-k (bounds the ``[rows, V]`` logits).
    """

    batch_tokens: int = 8192
    train_tokens: int | None = None
    seconds: float | None = None
    heldout_every: int = 10
    heldout_tokens: int = 50_000
    amp: torch.dtype | None = None
    head_chunk: int = 8192
    seed: int = 0

    def __post_init__(self):
        if self.batch_tokens < 1 or self.head_chunk < 1 or self.heldout_tokens < 1:
            raise ValueError(f"need batch_tokens, head_chunk, heldout_tokens >= 1, got {self.batch_tokens}, "
                             f"{self.head_chunk}, {self.heldout_tokens}")
        if self.train_tokens is not None and self.train_tokens < 1:
            raise ValueError(f"train_tokens must be >= 1 (or None for one epoch), got {self.train_tokens}")
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"seconds must be > 0 (or None), got {self.seconds}")
        if self.heldout_every < 2:
            raise ValueError(f"heldout_every must be >= 2, got {self.heldout_every}")
        if self.amp not in (None, torch.bfloat16, torch.float16):
            raise ValueError(f"amp must be None, torch.bfloat16 or torch.float16, got {self.amp}")

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["amp"] = None if self.amp is None else str(self.amp).removeprefix("torch.")
        return d


@dataclass
class FeatureBatch:
    """One padded batch of online features (right-padded; padding rows carry ``assistant`` False).

    ``fused [B, T, F]``, ``final [B, T, H]`` (the model's dtype), ``tokens [B, T]``,
    ``topk_ids [B, T, k]``, ``topk_p [B, T, k]`` (float32), ``assistant [B, T]`` (position ``t``'s
    loss counts: token ``t + 1`` is assistant text), ``lengths [B]``.
    """

    fused: torch.Tensor
    final: torch.Tensor
    tokens: torch.Tensor
    topk_ids: torch.Tensor
    topk_p: torch.Tensor
    assistant: torch.Tensor
    lengths: torch.Tensor

    def eagle3_inputs(self):
        """The batch tuple :func:`~specdec.training.eagle3.step_losses` reads."""
        return self.fused.float(), self.tokens, self.topk_ids, self.topk_p, self.assistant


@torch.no_grad()
def target_batch(model, seqs: Sequence[TeacherSequence], spec: FeatureSpec, *, head_chunk: int = 8192
                 ) -> FeatureBatch:
    """The target's features over ``seqs`` in one right-padded forward on the model's device (no mask
    needed: the causal mask hides the padding keys). ValueError for a sequence longer than
    ``spec.max_len``."""
    if not seqs:
        raise ValueError("target_batch needs at least one sequence")
    num_layers = int(model.config.num_hidden_layers)
    if max(spec.layers) > num_layers:
        raise ValueError(f"layer index {max(spec.layers)} > the target's {num_layers} layers")
    lengths = [len(s.ids) for s in seqs]
    if min(lengths) < 2 or max(lengths) > spec.max_len:
        raise ValueError(f"sequence lengths must lie in [2, {spec.max_len}], got {min(lengths)}..{max(lengths)}")
    device = next(model.parameters()).device
    B, T = len(seqs), max(lengths)
    ids = torch.zeros(B, T, dtype=torch.long)
    assistant = torch.zeros(B, T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        ids[b, : lengths[b]] = torch.tensor(s.ids, dtype=torch.long)
        # position t's loss predicts token t + 1: it counts where that token is assistant text
        assistant[b, : lengths[b] - 1] = torch.tensor(s.assistant[1:], dtype=torch.bool)
    ids, assistant = ids.to(device), assistant.to(device)
    out = decoder_of(model)(input_ids=ids, output_hidden_states=True)
    fused = torch.cat([out.hidden_states[i] for i in spec.layers], -1)
    final = out.last_hidden_state
    head = model.get_output_embeddings()
    flat = final.reshape(B * T, -1)
    top_ids = torch.empty(B * T, spec.top_k, dtype=torch.long, device=device)
    top_p = torch.empty(B * T, spec.top_k, dtype=torch.float32, device=device)
    for s in range(0, B * T, head_chunk):
        probs = torch.softmax(head(flat[s: s + head_chunk]).float(), -1)
        top = torch.topk(probs, spec.top_k, dim=-1)
        top_ids[s: s + head_chunk], top_p[s: s + head_chunk] = top.indices, top.values
    return FeatureBatch(fused, final, ids, top_ids.view(B, T, -1), top_p.view(B, T, -1), assistant,
                        torch.tensor(lengths, device=device))


def heldout_features(model, seqs: Sequence[TeacherSequence], spec: FeatureSpec, batch_tokens: int,
                     *, head_chunk: int = 8192) -> FeatureSet:
    """The held-out split as an in-memory :class:`FeatureSet` (fp16 features, as the cache keeps
    them), on the model's device, so the cached trainers' held-out metrics apply unchanged."""
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in ("fused", "final", "tokens", "assistant", "topk_ids",
                                                            "topk_p")}
    lengths: list[int] = []
    for group in length_groups([len(s.ids) for s in seqs], batch_tokens):
        fb = target_batch(model, [seqs[i] for i in group], spec, head_chunk=head_chunk)
        for b, n in enumerate(fb.lengths.tolist()):
            parts["fused"].append(fb.fused[b, :n].half())
            parts["final"].append(fb.final[b, :n].half())
            parts["tokens"].append(fb.tokens[b, :n])
            parts["assistant"].append(fb.assistant[b, :n])
            parts["topk_ids"].append(fb.topk_ids[b, :n])
            parts["topk_p"].append(fb.topk_p[b, :n].half())
            lengths.append(n)
    cat = {k: torch.cat(v) for k, v in parts.items()}
    offsets = torch.tensor([0] + lengths, device=cat["tokens"].device).cumsum(0)
    return FeatureSet(**cat, offsets=offsets)


def length_groups(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices grouped by similar length, each group at most ``batch_tokens`` padded tokens (a
    longer sequence gets a group of its own)."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out, cur, width = [], [], 0
    for i in order:
        if cur and max(width, lengths[i]) * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, lengths[i])
    return out + ([cur] if cur else [])


def split_sequences(seqs: Sequence[TeacherSequence], cfg: OnlineConfig
                    ) -> tuple[list[TeacherSequence], list[TeacherSequence]]:
    """``(train, held-out)``: every ``heldout_every``-th sequence is held out, the held-out ones
    kept while they fit ``heldout_tokens``."""
    train, held, used = [], [], 0
    for i, s in enumerate(seqs):
        if not is_heldout(i, cfg.heldout_every):
            train.append(s)
        elif used + len(s.ids) <= cfg.heldout_tokens:
            held.append(s)
            used += len(s.ids)
    return train, held


def plan_steps(lengths: Sequence[int], cfg: OnlineConfig) -> list[list[int]]:
    """The optimiser steps in order: each epoch the length groups in a fresh seeded order, epochs
    repeated until ``train_tokens`` token passes are planned (one epoch when None)."""
    groups = length_groups(lengths, cfg.batch_tokens)
    per_epoch = sum(lengths)
    if per_epoch == 0:
        raise ValueError("no training tokens")
    epochs = 1 if cfg.train_tokens is None else math.ceil(cfg.train_tokens / per_epoch)
    gen = torch.Generator().manual_seed(cfg.seed)
    plan, tokens = [], 0
    for _ in range(epochs):
        for g in torch.randperm(len(groups), generator=gen).tolist():
            if cfg.train_tokens is not None and tokens >= cfg.train_tokens:
                return plan
            plan.append(groups[g])
            tokens += sum(lengths[i] for i in groups[g])
    return plan


@dataclass
class _Eagle3State:
    layer: Eagle3Layer
    rows: torch.Tensor
    table: torch.Tensor
    opt: torch.optim.Optimizer
    sched: object
    weights: list[float]
    losses: list[float]


@dataclass
class _MedusaState:
    heads: MedusaHeads
    table: torch.Tensor
    opt: torch.optim.Optimizer
    sched: object
    weights: torch.Tensor
    losses: list[float]


def _medusa_labels(fb: FeatureBatch, k: int):
    """``(hidden [n, H], ids [k, n, top_k], p [k, n, top_k], valid [k, n])`` over the rows whose
    first head has a label (as the cached trainer keeps them): head ``i`` at position ``t`` learns
    the target's top-k at ``t + i + 1``, valid while that position is in the sequence and its next
    token is assistant text."""
    T = fb.tokens.shape[1]

    def shifted(x, j, fill):
        pad = torch.full_like(x[:, : min(j, T)], fill)
        return torch.cat([x[:, j:], pad], 1) if j < T else pad

    valid = torch.stack([shifted(fb.assistant, i + 1, False) for i in range(k)])  # [k, B, T]
    keep = valid[0]
    ids = torch.stack([shifted(fb.topk_ids, i + 1, 0)[keep] for i in range(k)])
    p = torch.stack([shifted(fb.topk_p, i + 1, 0.0)[keep] for i in range(k)])
    return fb.final[keep], ids, p, valid[:, keep]


def _assistant_tokens(seqs: Sequence[TeacherSequence]) -> torch.Tensor:
    return torch.tensor([t for s in seqs for t, a in zip(s.ids, s.assistant) if a], dtype=torch.long)


def train_online(model, train: Sequence[TeacherSequence], held: Sequence[TeacherSequence], spec: FeatureSpec,
                 cfg: OnlineConfig, *, eagle3: Eagle3TrainConfig | None = None, medusa: HeadsTrainConfig | None = None,
                 progress: bool = True, log: Callable[[str], None] | None = None) -> dict:
    """Train the EAGLE-3 layer (``eagle3``) and/or Medusa heads (``medusa``) on online features.

    ``model``: the target on the training device and dtype. ``eagle3.batch_tokens`` and ``epochs``
    must equal ``cfg``'s; Medusa's ``batch_size`` and ``epochs`` are replaced by the stream's batches.
    Returns ``{"eagle3": (layer, report) | None, "medusa": (heads, report) | None, "stream": {...}}``,
    each report with held-out metrics before and after, tokens, steps and seconds.
    """
    if eagle3 is None and medusa is None:
        raise ValueError("train_online needs eagle3 and/or medusa settings")
    if not train or not held:
        raise ValueError(f"need training and held-out sequences, got {len(train)} and {len(held)}")
    if eagle3 is not None and eagle3.batch_tokens != cfg.batch_tokens:
        raise ValueError(f"eagle3.batch_tokens {eagle3.batch_tokens} != the stream's {cfg.batch_tokens}")
    torch.manual_seed(cfg.seed)
    dev = next(model.parameters()).device
    lm_weight = model.get_output_embeddings().weight.detach().float()
    embed = model.get_input_embeddings().weight.detach().float()
    V = lm_weight.shape[0]
    lengths = [len(s.ids) for s in train]
    plan = plan_steps(lengths, cfg)
    vocab_tokens = _assistant_tokens(train)
    t0 = time.time()
    heldset = heldout_features(model, held, spec, cfg.batch_tokens, head_chunk=cfg.head_chunk)
    held_idx = list(range(heldset.num_sequences))
    held_rows = torch.arange(int(heldset.offsets[-1]), device=dev)
    eval_seconds = time.time() - t0
    e3 = md = None
    reports: dict = {}
    if eagle3 is not None:
        layer_cfg = Eagle3Config.from_target(model.config, spec.layers)
        layer = Eagle3Layer(layer_cfg, reduced_vocabulary(vocab_tokens, eagle3.reduced_vocab, V)).to(dev)
        layer.final_norm.weight.data.copy_(decoder_of(model).norm.weight.detach().float())
        opt = torch.optim.AdamW(layer.parameters(), lr=eagle3.lr, weight_decay=0.0)
        e3 = _Eagle3State(layer, layer.lm_rows(lm_weight), reduced_table(layer.vocab_ids, V, dev), opt,
                          cosine_schedule(opt, len(plan), min(eagle3.warmup, len(plan) // 10)),
                          [eagle3.step_decay ** j for j in range(eagle3.steps)], [])
        reports["eagle3_before"] = evaluate_eagle3(layer, heldset, held_idx, embed, lm_weight, eagle3)
    if medusa is not None:
        heads = MedusaHeads(int(lm_weight.shape[1]), medusa.num_heads, medusa.num_layers,
                            reduced_vocabulary(vocab_tokens, medusa.reduced_vocab, V)).to(dev)
        opt = torch.optim.AdamW(heads.parameters(), lr=medusa.lr, weight_decay=0.0)
        md = _MedusaState(heads, reduced_table(heads.vocab_ids, V, dev), opt, cosine_schedule(opt, len(plan)),
                          torch.tensor([medusa.head_decay ** i for i in range(medusa.num_heads)], device=dev), [])
        reports["medusa_before"] = evaluate_medusa(heads, heldset, held_rows, lm_weight, medusa.max_rank)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), desc="online training", unit="step")
    amp = torch.autocast(dev.type, dtype=cfg.amp) if cfg.amp is not None and dev.type == "cuda" else nullcontext()
    start, target_s, steps, seen, stopped = time.time(), 0.0, 0, 0, "planned tokens done"
    for group in plan:
        if cfg.seconds is not None and time.time() - start >= cfg.seconds:
            stopped = "seconds"
            break
        t = time.time()
        fb = target_batch(model, [train[i] for i in group], spec, head_chunk=cfg.head_chunk)
        target_s += time.time() - t
        with amp:
            if e3 is not None:
                e3.layer.train()
                res = step_losses(e3.layer, e3.rows, e3.table, fb.eagle3_inputs(), embed, eagle3.steps)
                loss = sum(w * c / max(m, 1) for w, (c, m, _, _) in zip(e3.weights, res)) / sum(e3.weights)
                optimizer_step(loss, e3.opt, e3.sched, e3.losses)
            if md is not None:
                md.heads.train()
                hidden, ids, p, valid = _medusa_labels(fb, medusa.num_heads)
                if hidden.shape[0]:
                    optimizer_step(kd_loss(md.heads, hidden, ids, p, valid, md.table, lm_weight, md.weights),
                                   md.opt, md.sched, md.losses)
        steps += 1
        seen += int(fb.lengths.sum())
        if bar is not None:
            bar.update(1)
            bar.set_postfix(tokens=seen, **({"eagle3": f"{_recent(e3.losses):.3f}"} if e3 else {}),
                            **({"medusa": f"{_recent(md.losses):.3f}"} if md else {}))
        if log is not None and steps % 100 == 0:
            log(f"online: {steps}/{len(plan)} steps, {seen} tokens, {time.time() - start:.0f} s")
    if bar is not None:
        bar.close()
    train_s = time.time() - start
    stream = {"config": cfg.to_dict(), "feature_spec": asdict(spec), "train_sequences": len(train),
              "unique_train_tokens": sum(lengths), "heldout_sequences": len(held),
              "heldout_tokens": int(heldset.offsets[-1]), "planned_steps": len(plan), "steps": steps,
              "token_passes": seen, "epochs": round(seen / sum(lengths), 3), "stopped": stopped,
              "seconds": round(train_s, 1), "target_forward_seconds": round(target_s, 1),
              "tokens_per_second": round(seen / max(train_s, 1e-9), 1), "heldout_build_seconds": round(eval_seconds, 1),
              "vocab_from": "assistant tokens of the training sequences", "device": str(dev)}
    out: dict = {"stream": stream, "eagle3": None, "medusa": None}
    if e3 is not None:
        e3.layer.eval()
        report = {"config": asdict(eagle3), "online": stream, "train_sequences": len(train),
                  "train_tokens": seen, "steps": steps, "train_loss_last": round(_recent(e3.losses), 4),
                  "heldout_before": reports["eagle3_before"],
                  "heldout": evaluate_eagle3(e3.layer, heldset, held_idx, embed, lm_weight, eagle3),
                  "heldout_every": cfg.heldout_every, "train_seconds": round(train_s, 1)}
        out["eagle3"] = (e3.layer, report)
    if md is not None:
        md.heads.eval()
        report = {"config": asdict(medusa), "labels": "target top-k distribution (KD), online", "online": stream,
                  "train_sequences": len(train), "train_tokens": seen, "steps": steps,
                  "train_loss_last": round(_recent(md.losses), 4), "heldout_before": reports["medusa_before"],
                  "heldout": evaluate_medusa(md.heads, heldset, held_rows, lm_weight, medusa.max_rank),
                  "heldout_every": cfg.heldout_every, "train_seconds": round(train_s, 1)}
        out["medusa"] = (md.heads, report)
    return out


def _recent(losses: list[float], window: int = 20) -> float:
    tail = losses[-window:]
    return sum(tail) / len(tail) if tail else float("nan")
