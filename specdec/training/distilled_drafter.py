"""A small drafter distilled from the target: a few of its decoder layers, its embeddings and LM head.

``num_layers`` decoder layers of the target's architecture, initialised from evenly spaced target
layers, trained on the target's greedy responses. Embeddings and LM head are the target's, frozen and
not stored; the manifest is bound to the tokenizer and names the embedding fingerprint, so loading on
other embeddings is refused (an explicit override warns).
"""

from __future__ import annotations

import copy
import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Sequence

import torch
from torch import nn

from ..artifacts import IncompatibleArtifactError, Manifest, load_artifact, tensors_fingerprint
from .loop import cosine_schedule, is_heldout, optimizer_step

_SHARED = ("embed_tokens", "lm_head")


@dataclass
class DrafterTrainConfig:
    num_layers: int = 2
    epochs: int = 1
    lr: float = 3e-4
    batch_size: int = 4  # sequences per step
    seed: int = 0

    def __post_init__(self):
        for name in ("num_layers", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"DrafterTrainConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def _is_shared(name: str) -> bool:
    return any(part in name for part in _SHARED)


def embeddings_fingerprint(model) -> str:
    return tensors_fingerprint([("embed", model.get_input_embeddings().weight)], kind="emb")


def small_drafter(target, num_layers: int):
    """A ``num_layers``-layer copy of ``target``'s architecture, initialised from evenly spaced
    target layers, sharing (the same tensors as) the target's embeddings and LM head."""
    from transformers import AutoModelForCausalLM

    total = target.config.num_hidden_layers
    if not 1 <= num_layers <= total:
        raise ValueError(f"num_layers must be in [1, {total}], got {num_layers}")
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = num_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:num_layers]
    drafter = AutoModelForCausalLM.from_config(cfg, dtype=target.dtype).to(target.device)
    picks = [round(i * (total - 1) / max(num_layers - 1, 1)) for i in range(num_layers)]
    src = target.get_decoder().layers
    for dst, i in zip(drafter.get_decoder().layers, picks):
        dst.load_state_dict(src[i].state_dict())
    drafter.get_decoder().norm.load_state_dict(target.get_decoder().norm.state_dict())
    _share(drafter, target)
    return drafter.eval()


def _share(drafter, target) -> None:
    drafter.get_input_embeddings().weight = target.get_input_embeddings().weight
    drafter.get_output_embeddings().weight = target.get_output_embeddings().weight


def own_tensors(drafter) -> dict[str, torch.Tensor]:
    """What the artifact stores: everything but the shared embeddings / LM head."""
    return {k: v for k, v in drafter.state_dict().items() if not _is_shared(k)}


def _batches(seqs: Sequence[tuple[list[int], int]], size: int, gen: torch.Generator | None):
    order = torch.randperm(len(seqs), generator=gen).tolist() if gen is not None else list(range(len(seqs)))
    for s in range(0, len(order), size):
        chunk = [seqs[i] for i in order[s: s + size]]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        labels = torch.full((len(chunk), width), -100, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, (toks, start) in enumerate(chunk):
            n = len(toks)
            ids[row, :n] = torch.tensor(toks)
            mask[row, :n] = 1
            # position t predicts toks[t+1]; only response tokens are targets
            labels[row, start - 1: n - 1] = torch.tensor(toks[start:n])
        yield ids, labels, mask


def _step_loss(drafter, ids, labels, mask):
    dev = next(drafter.parameters()).device
    logits = drafter(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits
    flat = labels.to(dev).reshape(-1)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), flat, ignore_index=-100), \
        logits, flat


@torch.no_grad()
def evaluate_drafter(drafter, seqs, batch_size: int = 4) -> dict:
    """Held-out next-token loss and top-1 agreement with the target's greedy tokens."""
    loss_sum, hits, count = 0.0, 0, 0
    for ids, labels, mask in _batches(seqs, batch_size, None):
        loss, logits, flat = _step_loss(drafter, ids, labels, mask)
        use = flat != -100
        n = int(use.sum())
        loss_sum += float(loss) * n
        hits += int((logits.reshape(-1, logits.shape[-1]).argmax(-1) == flat)[use].sum())
        count += n
    return {"loss": loss_sum / max(count, 1), "top1": hits / max(count, 1), "tokens": count}


def train_drafter(drafter, records: Sequence[dict], cfg: DrafterTrainConfig, *, heldout_every: int = 10,
                  progress: bool = True) -> dict:
    """Distil ``records`` (prompt_ids / response_ids) into ``drafter``; shared tensors stay frozen."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    seqs = [(r["prompt_ids"] + r["response_ids"], len(r["prompt_ids"])) for r in records]
    # every N-th record of the prompt file is held out; synthetic records always train
    held_mask = [is_heldout(i, heldout_every) and r.get("source", "prompts") == "prompts"
                 for i, r in enumerate(records)]
    train = [s for s, h in zip(seqs, held_mask) if not h]
    held = [s for s, h in zip(seqs, held_mask) if h]
    if not train or not held:
        raise ValueError(f"need training and held-out records, got {len(train)} and {len(held)}")
    params = [p for n, p in drafter.named_parameters() if not _is_shared(n)]
    for n, p in drafter.named_parameters():
        p.requires_grad_(not _is_shared(n))
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    total = math.ceil(len(train) / cfg.batch_size) * cfg.epochs
    sched = cosine_schedule(opt, total)
    before = evaluate_drafter(drafter.eval(), held)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="drafter", unit="step")
    t0, losses = time.time(), []
    drafter.train()
    for _ in range(cfg.epochs):
        for ids, labels, mask in _batches(train, cfg.batch_size, gen):
            loss, _, _ = _step_loss(drafter, ids, labels, mask)
            optimizer_step(loss, opt, sched, losses, bar, window=10)
    if bar is not None:
        bar.close()
    drafter.eval()
    for p in drafter.parameters():
        p.requires_grad_(False)
    return {"config": asdict(cfg), "train_records": len(train), "train_seconds": round(time.time() - t0, 1),
            "train_loss_last": sum(losses[-10:]) / len(losses[-10:]), "heldout_before": before,
            "heldout": evaluate_drafter(drafter, held), "heldout_every": heldout_every}


def load_drafter(directory: str, target, *, allow_mismatch: bool = False):
    """Rebuild a drafter saved by ``specdec train draft`` on ``target``'s embeddings and LM head."""
    from transformers import AutoConfig, AutoModelForCausalLM

    tensors, manifest = load_artifact(directory)
    if manifest.kind != "draft_model":
        raise ValueError(f"{directory} holds a {manifest.kind!r} artifact, not 'draft_model'")
    emb = embeddings_fingerprint(target)
    if emb != manifest.config["embeddings_fingerprint"]:
        msg = (f"drafter {manifest.name!r} was trained on embeddings {manifest.config['embeddings_fingerprint']}, "
               f"the target's are {emb}")
        if not allow_mismatch:
            raise IncompatibleArtifactError(msg + ". Retrain with `specdec train draft` or pass allow_mismatch=True.")
        warnings.warn(msg + " (allow_mismatch=True: loading anyway)", RuntimeWarning, stacklevel=2)
    base = dict(manifest.config["model_config"])
    cfg = AutoConfig.for_model(base.pop("model_type"), **base)
    drafter = AutoModelForCausalLM.from_config(cfg, dtype=target.dtype).to(target.device)
    _share(drafter, target)
    missing, unexpected = drafter.load_state_dict(tensors, strict=False)
    missing = [k for k in missing if not _is_shared(k)]
    if missing or unexpected:
        raise ValueError(f"drafter weights do not match its config: missing {missing}, unexpected {unexpected}")
    return drafter.eval(), manifest


def drafter_manifest(drafter, target, tokenizer_fp: str, report: dict, name: str) -> Manifest:
    from ..artifacts import config_dict

    return Manifest(kind="draft_model", name=name, bound_to="tokenizer", fingerprint=tokenizer_fp,
                    config={"model_config": config_dict(drafter.config),
                            "embeddings_fingerprint": embeddings_fingerprint(target),
                            "num_layers": drafter.config.num_hidden_layers},
                    training=report)
