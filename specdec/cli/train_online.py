"""``specdec train online``: EAGLE-3 and Medusa-KD trained on target features computed during training.

No feature cache: each optimiser step runs the target over one batch of sequences and steps both
drafters on that forward (:mod:`specdec.training.online`). Sources:

* ``--source selfdistill``: the target's own greedy answers, generated first in big batches, to the
  prompts of ``--prompt-ids`` (a token-id file: :mod:`specdec.training.prompt_ids`) or
  ``--prompts`` (a prompt JSONL); ``--gen-seconds`` bounds the generation;
* ``--source sharegpt``: ShareGPT conversations teacher-forced in the chat template (``--sharegpt``
  or the packaged file), the data the cached path runs out of memory on.

Writes one bound artifact per drafter asked for (``--eagle3-out``, ``--medusa-out``; fp16 weights)
and, with ``--report``, one JSON of everything measured. The artifacts are bound to the target's
float32 fingerprint whatever ``--dtype`` the forwards run in.
"""

from __future__ import annotations

import json
import os
import sys
import time

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}


def _check(args) -> None:
    """Refuse bad settings before the target is loaded."""
    if not args.eagle3_out and not args.medusa_out:
        raise SystemExit("name at least one artifact to train: --eagle3-out DIR and/or --medusa-out DIR")
    if args.source not in ("selfdistill", "sharegpt"):
        raise SystemExit(f"--source must be selfdistill or sharegpt, got {args.source!r}")
    if args.source == "selfdistill":
        if (args.prompt_ids is None) == (args.prompts is None):
            raise SystemExit("--source selfdistill needs exactly one of --prompt-ids FILE and --prompts JSONL")
        for flag, path in (("--prompt-ids", args.prompt_ids), ("--prompts", args.prompts)):
            if path is not None and not os.path.isfile(path):
                raise SystemExit(f"{flag} {path}: no such file")
    else:
        if args.prompt_ids or args.prompts:
            raise SystemExit("--prompt-ids and --prompts belong to --source selfdistill")
        if args.sharegpt is not None and not os.path.isfile(args.sharegpt):
            raise SystemExit(f"--sharegpt {args.sharegpt}: no such file")
        if args.sharegpt is None:
            from ..training.sharegpt import packaged_path

            try:
                packaged_path()
            except (ModuleNotFoundError, FileNotFoundError) as exc:
                raise SystemExit(str(exc)) from None
    for name in ("max_new_tokens", "gen_batch", "batch_tokens", "heldout_tokens", "top_k", "steps", "heads",
                 "medusa_layers"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("max_prompts", "train_tokens", "source_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    for name in ("gen_seconds", "train_seconds"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be > 0, got {value}")
    if args.max_len < 2 or args.heldout_every < 2 or args.vocab < 0 or args.medusa_vocab < 0:
        raise SystemExit(f"need --max-len >= 2, --heldout-every >= 2, --vocab/--medusa-vocab >= 0, got "
                         f"{args.max_len}, {args.heldout_every}, {args.vocab}, {args.medusa_vocab}")
    if args.dtype not in DTYPES:
        raise SystemExit(f"--dtype must be one of {sorted(DTYPES)}, got {args.dtype!r}")
    if args.amp not in ("none", "bf16", "fp16"):
        raise SystemExit(f"--amp must be none, bf16 or fp16, got {args.amp!r}")
    for flag, out in (("--eagle3-out", args.eagle3_out), ("--medusa-out", args.medusa_out)):
        if out and os.path.exists(out) and not os.path.isdir(out):
            raise SystemExit(f"{flag} {out} exists and is not a folder")
    if args.report and os.path.isdir(args.report):
        raise SystemExit(f"--report {args.report} is a folder; name a JSON file")


def _prompts(args, tokenizer, vocab: int) -> tuple[list[list[int]], dict]:
    if args.prompt_ids:
        from ..training.prompt_ids import read_prompt_ids

        prompts, meta = read_prompt_ids(args.prompt_ids)
        high = max(max(p) for p in prompts)
        if high >= vocab:
            raise SystemExit(f"--prompt-ids {args.prompt_ids} holds token id {high}, outside the target's {vocab} "
                             f"ids: it was made for another tokenizer ({meta.get('tokenizer')})")
        source = {"prompt_ids": os.path.basename(args.prompt_ids), **{k: meta[k] for k in meta if k != "format"}}
    else:
        from ..prompts import encode_first_turn, read_prompt_records

        prompts = [encode_first_turn(tokenizer, r) for r in read_prompt_records(args.prompts)]
        source = {"prompts": os.path.basename(args.prompts), "prompts_read": len(prompts)}
    return prompts[: args.max_prompts], source


def _selfdistill(args, model, tokenizer, log) -> tuple[list, dict]:
    """The target's greedy answers to the prompts, in chunks until ``--gen-seconds``; returns the
    teacher sequences (prompt + answer, cut to ``--max-len``) and what generation did."""
    from ..training.data import greedy_responses
    from ..training.sources import selfdistill_sequences

    prompts, source = _prompts(args, tokenizer, int(model.get_output_embeddings().weight.shape[0]))
    t0, records, answered, new_tokens = time.time(), [], 0, 0
    chunk = args.gen_batch * 2  # the clock is read between chunks: at most two batches past --gen-seconds
    stopped = "every prompt answered"
    for s in range(0, len(prompts), chunk):
        if args.gen_seconds is not None and time.time() - t0 >= args.gen_seconds:
            stopped = "--gen-seconds"
            break
        part = prompts[s: s + chunk]
        outs = greedy_responses(model, part, args.max_new_tokens, tokenizer.eos_token_id, args.gen_batch)
        for p, r in zip(part, outs):
            if r:
                records.append({"prompt_ids": p, "response_ids": r})
                new_tokens += len(r)
        answered += len(part)
        log(f"self-distillation: {answered}/{len(prompts)} prompts, {new_tokens} answer tokens, "
            f"{time.time() - t0:.0f} s")
    seconds = time.time() - t0
    if not records:
        raise SystemExit("self-distillation produced no answers (raise --gen-seconds or give more prompts)")
    # heldout_every past the last index: every record becomes a sequence here; the online split
    # (every --heldout-every-th sequence) is made once, by split_sequences, for both sources alike.
    seqs, _ = selfdistill_sequences(records, args.max_len, heldout_every=len(records) + 1)
    return seqs, {**source, "prompts_answered": answered, "answers": len(records), "answer_tokens": new_tokens,
                  "max_new_tokens": args.max_new_tokens, "gen_batch": args.gen_batch, "stopped": stopped,
                  "seconds": round(seconds, 1), "answer_tokens_per_second": round(new_tokens / max(seconds, 1e-9), 1)}


def _eagle3_manifest(args, model, tok, fp, layer, report, facts):
    import torch

    from ..artifacts import Manifest, tokenizer_fingerprint

    return Manifest(
        kind="eagle", name=args.name or "eagle3-online", bound_to="target", fingerprint=fp,
        config={"architecture": "eagle3", "layer": layer.config.to_dict(),
                "vocab_size": int(model.get_output_embeddings().weight.shape[0]),
                "reduced_vocab": 0 if layer.vocab_ids is None else int(layer.vocab_ids.numel()),
                "drafting": {"top_k": args.top_k_draft, "max_depth": args.max_depth, "min_prob": args.min_prob},
                "stored_dtype": "float16", "tokenizer_fingerprint": tokenizer_fingerprint(tok)},
        training={**report, **facts, "torch": torch.__version__})


def _medusa_manifest(args, model, tok, fp, heads, report, facts):
    import torch

    from ..artifacts import Manifest, tokenizer_fingerprint

    return Manifest(
        kind="medusa", name=args.name or f"medusa-kd-online-{args.heads}x{args.medusa_layers}", bound_to="target",
        fingerprint=fp,
        config={"hidden_size": heads.hidden_size, "num_heads": args.heads, "num_layers": args.medusa_layers,
                "vocab_size": int(model.get_output_embeddings().weight.shape[0]),
                "reduced_vocab": 0 if heads.vocab_ids is None else int(heads.vocab_ids.numel()),
                "rank_acc": report["heldout"]["rank_acc"], "stored_dtype": "float16",
                "tokenizer_fingerprint": tokenizer_fingerprint(tok)},
        training={**report, **facts, "torch": torch.__version__})


def online_main(args) -> int:
    import torch

    from ..artifacts import save_artifact, target_fingerprint
    from ..models import load_target
    from ..training.eagle3 import Eagle3TrainConfig
    from ..training.features import FeatureSpec
    from ..training.medusa import HeadsTrainConfig
    from ..training.online import OnlineConfig, split_sequences, train_online
    from .common import resolve_device
    from .train_cached import command_line
    from .train_features import parse_layers

    _check(args)
    amp = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]
    cfg = OnlineConfig(batch_tokens=args.batch_tokens, train_tokens=args.train_tokens, seconds=args.train_seconds,
                       heldout_every=args.heldout_every, heldout_tokens=args.heldout_tokens, amp=amp, seed=args.seed)
    e3cfg = Eagle3TrainConfig(reduced_vocab=args.vocab, steps=args.steps, epochs=1, lr=args.eagle3_lr,
                              batch_tokens=args.batch_tokens, seed=args.seed) if args.eagle3_out else None
    mdcfg = HeadsTrainConfig(num_heads=args.heads, num_layers=args.medusa_layers, reduced_vocab=args.medusa_vocab,
                             epochs=1, lr=args.medusa_lr, seed=args.seed) if args.medusa_out else None
    log = (lambda m: print(m, file=sys.stderr, flush=True))
    t_start = time.time()
    device = resolve_device(args.device)
    model, tok, _ = load_target(args.target, device=device)
    fp = target_fingerprint(model)  # the float32 checkpoint's, whatever dtype the forwards use
    model = model.to(getattr(torch, DTYPES[args.dtype]))
    spec = FeatureSpec(parse_layers(args.layers, int(model.config.num_hidden_layers)), args.top_k, args.max_len)
    t_loaded = time.time()
    log(f"target {args.target}: {fp} on {device} in {DTYPES[args.dtype]}")
    if args.source == "selfdistill":
        seqs, data_facts = _selfdistill(args, model, tok, log)
    else:
        from ..training.sources import sharegpt_sequences

        seqs, read = sharegpt_sequences(tok, spec.max_len, args.sharegpt, max_tokens=args.source_tokens)
        data_facts = {"source": "sharegpt", "file": os.path.basename(args.sharegpt or "packaged"),
                      "read": read.summary(), "sequences": len(seqs)}
    t_data = time.time()
    train, held = split_sequences(seqs, cfg)
    log(f"{len(train)} training sequences ({sum(len(s.ids) for s in train)} tokens), {len(held)} held out")
    result = train_online(model, train, held, spec, cfg, eagle3=e3cfg, medusa=mdcfg, progress=not args.no_progress,
                          log=log)
    t_train = time.time()
    facts = {"data": data_facts, "device": device, "target_dtype": DTYPES[args.dtype], "command": command_line(args),
             "seconds": {"load": round(t_loaded - t_start, 1), "data": round(t_data - t_loaded, 1),
                         "train": round(t_train - t_data, 1), "total": round(t_train - t_start, 1)}}
    summary = {"target": fp, **facts, "stream": result["stream"]}
    if result["eagle3"] is not None:
        layer, report = result["eagle3"]
        layer = layer.cpu()
        save_artifact(args.eagle3_out, layer.state_tensors(torch.float16),
                      _eagle3_manifest(args, model, tok, fp, layer, report, facts))
        summary["eagle3"] = {k: report[k] for k in ("heldout_before", "heldout", "train_tokens", "steps",
                                                    "train_loss_last")}
        log(f"saved {args.eagle3_out}: held-out top-1 per step {report['heldout']['top1']} (before "
            f"{report['heldout_before']['top1']}), greedy chain {report['heldout']['chain_accepted']}")
    if result["medusa"] is not None:
        heads, report = result["medusa"]
        heads = heads.cpu()
        manifest = _medusa_manifest(args, model, tok, fp, heads, report, facts)
        save_artifact(args.medusa_out, heads.state_tensors(), manifest)
        summary["medusa"] = {k: report[k] for k in ("heldout_before", "heldout", "train_tokens", "steps",
                                                    "train_loss_last")}
        log(f"saved {args.medusa_out}: heads top-1 (held-out greedy windows) {report['heldout']['top1']} (before "
            f"{report['heldout_before']['top1']})")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(summary, f, indent=1)
    stream = result["stream"]
    print(f"online training: {stream['token_passes']} token passes ({stream['unique_train_tokens']} unique, "
          f"{stream['epochs']} epochs) in {stream['seconds']:.0f} s ({stream['tokens_per_second']:.0f} tokens/s); "
          f"stopped: {stream['stopped']}")
    return 0


def add_parser(kinds) -> None:
    o = kinds.add_parser("online", help="EAGLE-3 and/or Medusa-KD on target features computed during training "
                                        "(no feature cache)")
    o.add_argument("--target", "--model", dest="target", default="default",
                   help="'default' (SmolLM2-135M), a HF directory or a .gguf file")
    o.add_argument("--source", default="selfdistill", help="selfdistill (greedy answers) or sharegpt (conversations)")
    o.add_argument("--prompt-ids", default=None, help="selfdistill: token-id prompt file (.npz)")
    o.add_argument("--prompts", default=None, help="selfdistill: prompt JSONL (question_id, category, turns)")
    o.add_argument("--max-prompts", type=int, default=None, help="selfdistill: use the first N prompts")
    o.add_argument("--sharegpt", default=None, help="sharegpt: the JSON file (default: the packaged copy)")
    o.add_argument("--source-tokens", type=int, default=None, help="sharegpt: encode conversations up to N tokens")
    o.add_argument("--max-new-tokens", type=int, default=256, help="selfdistill: answer length")
    o.add_argument("--gen-batch", type=int, default=64, help="selfdistill: prompts per generate() batch")
    o.add_argument("--gen-seconds", type=float, default=None, help="selfdistill: stop generating after S seconds")
    o.add_argument("--eagle3-out", default=None, help="EAGLE-3 artifact folder to write")
    o.add_argument("--medusa-out", default=None, help="Medusa-KD artifact folder to write")
    o.add_argument("--name", default=None, help="artifact name (default: eagle3-online / medusa-kd-online-KxL)")
    o.add_argument("--report", default=None, help="write every figure of the run to this JSON file")
    o.add_argument("--max-len", type=int, default=512, help="tokens kept per sequence")
    o.add_argument("--top-k", type=int, default=16, help="entries of the target's distribution kept as the label")
    o.add_argument("--layers", default="auto", help="hidden-state indices to fuse (auto = low, middle, high)")
    o.add_argument("--batch-tokens", type=int, default=8192, help="padded tokens per target forward and step")
    o.add_argument("--train-tokens", type=int, default=None,
                   help="token passes to train on (epochs repeat until reached; default: one epoch)")
    o.add_argument("--train-seconds", type=float, default=None, help="stop training after S seconds")
    o.add_argument("--heldout-every", type=int, default=10, help="every N-th sequence is held out")
    o.add_argument("--heldout-tokens", type=int, default=50_000, help="held-out tokens evaluated at most")
    o.add_argument("--device", default="auto", help="auto, cpu or cuda")
    o.add_argument("--dtype", default="float32", help="target forward dtype: float32, bfloat16 or float16")
    o.add_argument("--amp", default="none", help="drafters' autocast on CUDA: none, bf16 or fp16")
    o.add_argument("--seed", type=int, default=0)
    o.add_argument("--vocab", type=int, default=8192, help="EAGLE-3 reduced drafting vocabulary (0 = full)")
    o.add_argument("--steps", type=int, default=3, help="EAGLE-3 training-time-test depth")
    o.add_argument("--eagle3-lr", type=float, default=1e-3)
    o.add_argument("--top-k-draft", type=int, default=8, help="EAGLE-3 drafting default: children per node")
    o.add_argument("--max-depth", type=int, default=6, help="EAGLE-3 drafting default: deepest level")
    o.add_argument("--min-prob", type=float, default=1e-3, help="EAGLE-3 drafting default: stop below this")
    o.add_argument("--heads", type=int, default=4, help="Medusa heads")
    o.add_argument("--medusa-layers", type=int, default=1, help="residual blocks per Medusa head")
    o.add_argument("--medusa-vocab", type=int, default=8192, help="Medusa reduced vocabulary (0 = full)")
    o.add_argument("--medusa-lr", type=float, default=1e-3)
    o.add_argument("--no-progress", action="store_true", help="no progress bar")
    o.set_defaults(func=online_main)
