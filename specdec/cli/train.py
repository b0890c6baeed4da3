"""``specdec train heads|eagle|draft``: self-distil the target, train a proposer, save a bound artifact.

The whole refit in one command: fingerprint the target, build (or reuse) self-distillation data, train,
and write ``weights.safetensors`` + ``manifest.json`` (target fingerprint, data, hyper-parameters,
held-out metrics, wall time per stage).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import dataclass

import torch

from ..artifacts import Manifest, save_artifact, target_fingerprint, tokenizer_fingerprint
from ..models import load_target
from ..prompts import read_prompt_records
from ..training.synthetic import DEFAULT_BATCH as SYNTHETIC_BATCH
from .common import resolve_device


def _progress(stage: str, i: int, n: int) -> None:
    print(f"\r{stage}: {i}/{n}", end="" if i < n else "\n", file=sys.stderr, flush=True)


@dataclass
class _Run:
    """What every ``specdec train`` command starts from: the target on its device, its fingerprint,
    the prompt records, and the clock readings for the refit-time report."""

    device: str
    model: object
    tokenizer: object
    fingerprint: str
    records: list
    t_start: float
    t_loaded: float


def _start(args) -> _Run:
    if args.heldout_every < 2:
        raise SystemExit(f"--heldout-every must be >= 2 (every N-th record is held out), got {args.heldout_every}")
    t_start = time.time()
    device = resolve_device(args.device)
    model, tok, _ = load_target(args.target, device=device)
    t_loaded = time.time()
    fp = target_fingerprint(model)
    print(f"target {args.target}: {fp} (device {device})", file=sys.stderr)
    return _Run(device, model, tok, fp, read_prompt_records(args.prompts, limit=args.limit), t_start, t_loaded)


def _full_sequences(args, run: _Run):
    """``(FullSequences, source, synthetic report | None)``: the prompt records' greedy responses with
    full-sequence features (cached), extended by ``args.synthetic`` synthetic records when asked."""
    from ..training import data as sd
    from ..training.eagle1 import load_or_build_full

    t0 = time.time()
    responses, source = sd.load_or_generate_responses(run.model, run.tokenizer, run.records, target_fp=run.fingerprint,
                                                      max_new_tokens=args.max_new_tokens, cache_dir=args.cache_dir,
                                                      batch_size=args.gen_batch, progress=_progress)
    data, hidden_source = load_or_build_full(run.model, responses, target_fp=run.fingerprint,
                                             n_prompts=len(run.records), max_new_tokens=args.max_new_tokens,
                                             cache_dir=args.cache_dir, progress=_progress)
    source = f"{source}; features {hidden_source}"
    if not args.synthetic:
        return data, source, None
    extra, report = _synthetic(args, run)
    report["prompt_records_seconds"] = round(time.time() - t0 - report["seconds"], 1)
    return data.extended(extra), source, report


def _synthetic(args, run: _Run):
    """``(FullSequences, report)``: ``args.synthetic`` synthetic records (cached) and what the
    manifest records of them."""
    from ..training import synthetic as syn

    t0 = time.time()
    extra, source = syn.load_or_build(run.model, run.tokenizer, args.synthetic, target_fp=run.fingerprint,
                                      seed=args.synthetic_seed, max_new_tokens=args.max_new_tokens,
                                      cache_dir=args.cache_dir, batch_size=args.synthetic_batch, progress=_progress)
    return extra, {"prompts": args.synthetic, "records": len(extra.records), "seed": args.synthetic_seed,
                   "positions": int(extra.tokens.numel()), "source": source, "seconds": round(time.time() - t0, 1)}


def train_heads_main(args) -> int:
    from ..training import data as sd
    from ..training.medusa import HeadsTrainConfig, rows_from_full, train_medusa

    cfg = HeadsTrainConfig(num_heads=args.heads, num_layers=args.layers, reduced_vocab=args.vocab,
                           epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, seed=args.seed)
    if args.full and args.max_tokens is not None:
        raise SystemExit("--full trains on every record; it cannot be combined with --max-tokens")
    if args.synthetic and not args.full:
        raise SystemExit("--synthetic needs --full (synthetic records come with full-sequence features)")
    run = _start(args)
    device, model, tok, fp, records = run.device, run.model, run.tokenizer, run.fingerprint, run.records
    t_start, t_loaded, progress = run.t_start, run.t_loaded, _progress
    synthetic = None
    if args.full:
        full, source, synthetic = _full_sequences(args, run)
        data = rows_from_full(full)
    else:
        data, source = sd.load_or_build(model, tok, records, target_fp=fp, max_new_tokens=args.max_new_tokens,
                                        cache_dir=args.cache_dir, batch_size=args.gen_batch,
                                        max_tokens=args.max_tokens, progress=progress)
    t_data = time.time()
    lm_weight = model.get_output_embeddings().weight.detach().float()
    data.hidden = data.hidden.to(device)
    data.tokens, data.record = data.tokens.to("cpu"), data.record.to("cpu")
    heads, report = train_medusa(data, lm_weight, cfg, heldout_every=args.heldout_every, progress=True)
    heads = heads.cpu()
    t_train = time.time()
    manifest = Manifest(
        kind="medusa",
        name=args.name or f"medusa-{cfg.num_heads}x{cfg.num_layers}",
        bound_to="target",
        fingerprint=fp,
        config={"hidden_size": heads.hidden_size, "num_heads": cfg.num_heads, "num_layers": cfg.num_layers,
                "vocab_size": int(lm_weight.shape[0]),
                "reduced_vocab": 0 if heads.vocab_ids is None else int(heads.vocab_ids.numel()),
                "rank_acc": report["heldout"]["rank_acc"],
                "tokenizer_fingerprint": tokenizer_fingerprint(tok)},
        training={
            **report,
            "prompts": os.path.basename(args.prompts), "records": len(data.records),
            "rows": int(data.tokens.numel()), "max_new_tokens": args.max_new_tokens,
            "data_source": source, "max_tokens": args.max_tokens, "full": args.full, "synthetic": synthetic,
            "device": device,
            "torch": torch.__version__,
            "seconds": {"load": round(t_loaded - t_start, 1), "data": round(t_data - t_loaded, 1),
                        "train": round(t_train - t_data, 1), "total": round(t_train - t_start, 1)},
            "command": "specdec " + " ".join(shlex.quote(a) for a in getattr(args, "argv", sys.argv[1:])),
        },
    )
    save_artifact(args.out, heads.state_tensors(), manifest)
    held = report["heldout"]
    print(f"saved {args.out}: heads top-1 (held-out) {[round(x, 3) for x in held['top1']]}, "
          f"refit {t_train - t_start:.0f} s (data {t_data - t_loaded:.0f} s, train {t_train - t_data:.0f} s)")
    return 0


def train_eagle_main(args) -> int:
    from ..proposers.eagle_layer import EagleConfig
    from ..training.eagle1 import EagleTrainConfig, train_eagle

    cfg = EagleTrainConfig(reduced_vocab=args.vocab, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
                           context=args.context, ce_weight=args.ce_weight, noise=args.noise, seed=args.seed)
    run = _start(args)
    device, model, tok, fp = run.device, run.model, run.tokenizer, run.fingerprint
    t_start, t_loaded = run.t_start, run.t_loaded
    data, source, synthetic = _full_sequences(args, run)
    t_data = time.time()
    embed = model.get_input_embeddings().weight.detach().float()
    lm_weight = model.get_output_embeddings().weight.detach().float()
    layer, report = train_eagle(data, embed, lm_weight, EagleConfig.from_target(model.config), cfg,
                                heldout_every=args.heldout_every, progress=True)
    layer = layer.cpu()
    t_train = time.time()
    manifest = Manifest(
        kind="eagle",
        name=args.name or "eagle-1layer",
        bound_to="target",
        fingerprint=fp,
        config={"layer": layer.config.to_dict(), "vocab_size": int(lm_weight.shape[0]),
                "reduced_vocab": 0 if layer.vocab_ids is None else int(layer.vocab_ids.numel()),
                "drafting": {"top_k": args.top_k, "max_depth": args.max_depth, "min_prob": args.min_prob},
                "stored_dtype": "float16", "tokenizer_fingerprint": tokenizer_fingerprint(tok)},
        training={
            **report,
            "prompts": os.path.basename(args.prompts), "records": len(data.records),
            "positions": int(data.tokens.numel()), "max_new_tokens": args.max_new_tokens,
            "data_source": source, "synthetic": synthetic, "device": device,
            "torch": torch.__version__,
            "seconds": {"load": round(t_loaded - t_start, 1), "data": round(t_data - t_loaded, 1),
                        "train": round(t_train - t_data, 1), "total": round(t_train - t_start, 1)},
            "command": "specdec " + " ".join(shlex.quote(a) for a in getattr(args, "argv", sys.argv[1:])),
        },
    )
    save_artifact(args.out, layer.state_tensors(torch.float16), manifest)
    held = report["heldout"]
    print(f"saved {args.out}: held-out top-1 {held['top1']:.3f} (before {report['heldout_before']['top1']:.3f}), "
          f"loss {held['loss']:.3f}; refit {t_train - t_start:.0f} s (data {t_data - t_loaded:.0f} s, "
          f"train {t_train - t_data:.0f} s)")
    return 0


def train_draft_main(args) -> int:
    from ..training import data as sd
    from ..training.distilled_drafter import (DrafterTrainConfig, drafter_manifest, own_tensors, small_drafter,
                                              train_drafter)

    cfg = DrafterTrainConfig(num_layers=args.layers, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
                             seed=args.seed)
    run = _start(args)
    device, model, tok, fp, records = run.device, run.model, run.tokenizer, run.fingerprint, run.records
    t_start, progress = run.t_start, _progress
    responses, source = sd.load_or_generate_responses(model, tok, records, target_fp=fp,
                                                      max_new_tokens=args.max_new_tokens, cache_dir=args.cache_dir,
                                                      batch_size=args.gen_batch, progress=progress)
    if args.max_tokens is not None:
        responses = sd.select_by_budget(responses, args.max_tokens)
    synthetic = None
    if args.synthetic:
        extra, synthetic = _synthetic(args, run)
        responses = list(responses) + list(extra.records)  # appended: the held-out split is unchanged
    t_data = time.time()
    drafter = small_drafter(model, cfg.num_layers)
    report = train_drafter(drafter, responses, cfg, heldout_every=args.heldout_every)
    t_train = time.time()
    report.update({"prompts": os.path.basename(args.prompts), "records": len(responses), "data_source": source,
                   "synthetic": synthetic,
                   "max_new_tokens": args.max_new_tokens, "max_tokens": args.max_tokens, "device": device,
                   "target_fingerprint": fp, "torch": torch.__version__,
                   "seconds": {"data": round(t_data - t_start, 1), "train": round(t_train - t_data, 1)},
                   "command": "specdec " + " ".join(shlex.quote(a) for a in getattr(args, "argv", sys.argv[1:]))})
    manifest = drafter_manifest(drafter, model, tokenizer_fingerprint(tok), report,
                                args.name or f"drafter-{cfg.num_layers}L")
    save_artifact(args.out, own_tensors(drafter), manifest)
    print(f"saved {args.out}: held-out top-1 {report['heldout']['top1']:.3f} "
          f"(before training {report['heldout_before']['top1']:.3f}), train {t_train - t_data:.0f} s")
    return 0


def _common(p, epochs: int, lr: float, batch: int) -> None:
    p.add_argument("--target", "--model", dest="target", default="default",
                   help="'default' (SmolLM2-135M), a HF directory or a .gguf file")
    p.add_argument("--prompts", required=True, help="JSONL prompts (question_id, category, turns)")
    p.add_argument("--out", required=True, help="artifact directory to write")
    p.add_argument("--name", default=None)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--batch-size", type=int, default=batch)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="use only the first N prompts")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="keep only the shortest records within this many prompt+response tokens (CPU budget)")
    p.add_argument("--gen-batch", type=int, default=16, help="prompts per generate() batch")
    p.add_argument("--heldout-every", type=int, default=10, help="every N-th record is held out")
    p.add_argument("--cache-dir", default=os.path.join("benchmarks", "data"))


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _synthetic_args(p) -> None:
    p.add_argument("--synthetic", type=_count, default=0,
                   help="also train on N prompts the target writes itself, answered greedily (never held out; "
                        "--max-tokens selects among the prompt-file records only)")
    p.add_argument("--synthetic-seed", type=int, default=0, help="seed for writing the synthetic prompts")
    p.add_argument("--synthetic-batch", type=int, default=SYNTHETIC_BATCH,
                   help="rows per generate() batch for synthetic data (it changes the sampled prompts: part of the "
                        "cache name)")


def register(subparsers) -> None:
    """Add ``train heads | eagle | draft`` (self-distillation), ``train features | eagle3 | heads-kd |
    draft-kd`` (the feature cache) and ``train online`` (features computed during training) to a
    ``specdec`` argparse sub-parser collection."""
    train = subparsers.add_parser("train", help="train a proposer artifact (self-distillation)")
    kinds = train.add_subparsers(dest="train_kind", required=True)
    h = kinds.add_parser("heads", help="Medusa heads bound to the target checkpoint")
    _common(h, epochs=2, lr=1e-3, batch=256)
    h.add_argument("--heads", type=int, default=4)
    h.add_argument("--layers", type=int, default=1)
    h.add_argument("--vocab", type=int, default=8192, help="reduced drafting vocabulary size (0 = full)")
    h.add_argument(
        "--full",
        action="store_true",
        help="train on every record's response positions from the full-sequence feature cache "
        "(shared with train eagle) instead of a --max-tokens budget",
    )
    _synthetic_args(h)
    h.set_defaults(func=train_heads_main)
    e = kinds.add_parser("eagle", help="an EAGLE-style draft layer bound to the target checkpoint")
    _common(e, epochs=10, lr=2e-3, batch=8)
    e.add_argument("--vocab", type=int, default=8192, help="reduced drafting vocabulary size (0 = full)")
    e.add_argument("--context", type=int, default=256, help="prompt tokens kept before each response in training")
    e.add_argument("--ce-weight", type=float, default=0.5, help="weight of the token cross-entropy")
    e.add_argument("--noise", type=float, default=0.05, help="input-feature noise std, fraction of the feature RMS")
    _synthetic_args(e)
    e.add_argument("--top-k", type=int, default=8, help="drafting default: children per node / frontier width")
    e.add_argument("--max-depth", type=int, default=6, help="drafting default: deepest level")
    e.add_argument("--min-prob", type=float, default=1e-3, help="drafting default: stop below this path probability")
    e.set_defaults(func=train_eagle_main)
    d = kinds.add_parser("draft", help="a small drafter (target layers + shared embeddings), bound to the tokenizer")
    _common(d, epochs=1, lr=3e-4, batch=4)
    d.add_argument("--layers", type=int, default=2, help="decoder layers of the drafter")
    _synthetic_args(d)
    d.set_defaults(func=train_draft_main)
    # On the teacher-forced feature cache (ShareGPT, distillation labels): train_features, train_eagle3, train_kd.
    from .train_eagle3 import add_parser as add_eagle3
    from .train_features import add_parser as add_features
    from .train_kd import add_parsers as add_kd
    from .train_online import add_parser as add_online

    add_features(kinds)
    add_eagle3(kinds)
    add_kd(kinds)
    add_online(kinds)  # the same trainers on features computed during training (no cache)
