"""``specdec train eagle3``: an EAGLE-3 draft layer from cached teacher-forced features.

Reads one or more feature caches (``specdec train features``: ShareGPT conversations, self-distilled
answers), trains with training-time test (:mod:`.eagle3`), writes a bound artifact. Everything the
run used (caches, tokens, hyper-parameters, held-out metrics, stage times) goes into the manifest.
"""

from __future__ import annotations

import os
import shlex
import sys
import time


def _check(args) -> None:
    for d in args.features:
        if not os.path.isdir(d):
            raise SystemExit(f"--features {d}: no such feature cache folder (run `specdec train features` first)")
    if args.max_train_tokens is not None and args.max_train_tokens < 1:
        raise SystemExit(f"--max-train-tokens must be >= 1, got {args.max_train_tokens}")
    if args.heldout_every < 2:
        raise SystemExit(f"--heldout-every must be >= 2, got {args.heldout_every}")


def eagle3_main(args) -> int:
    import torch

    from ..artifacts import Manifest, save_artifact, target_fingerprint, tokenizer_fingerprint
    from ..proposers.eagle3_layer import Eagle3Config
    from .commands import _device, load_target
    from .eagle3 import Eagle3TrainConfig, train_eagle3
    from .features import load_many, read_meta

    _check(args)
    cfg = Eagle3TrainConfig(reduced_vocab=args.vocab, steps=args.steps, epochs=args.epochs, lr=args.lr,
                            batch_tokens=args.batch_tokens, seed=args.seed)
    spec = read_meta(args.features[0])["spec"]
    t_start = time.time()
    device = _device(args.device)
    model, tok = load_target(args.target, device)
    fp = target_fingerprint(model)
    t_loaded = time.time()
    data, facts = load_many(args.features, fp, args.max_tokens)
    data.fused = data.fused.to(device)
    t_data = time.time()
    layer_cfg = Eagle3Config.from_target(model.config, spec["layers"])
    layer, report = train_eagle3(data, model.get_input_embeddings().weight, model.get_output_embeddings().weight,
                                 model.get_decoder().norm.weight, layer_cfg, cfg, heldout_every=args.heldout_every,
                                 max_train_tokens=args.max_train_tokens)
    layer = layer.cpu()
    t_train = time.time()
    manifest = Manifest(
        kind="eagle", name=args.name or "eagle3-1layer", bound_to="target", fingerprint=fp,
        config={"architecture": "eagle3", "layer": layer.config.to_dict(),
                "vocab_size": int(model.get_output_embeddings().weight.shape[0]),
                "reduced_vocab": 0 if layer.vocab_ids is None else int(layer.vocab_ids.numel()),
                "drafting": {"top_k": args.top_k, "max_depth": args.max_depth, "min_prob": args.min_prob},
                "stored_dtype": "float16", "tokenizer_fingerprint": tokenizer_fingerprint(tok)},
        training={**report, "features": facts, "feature_spec": spec, "device": device, "torch": torch.__version__,
                  "seconds": {"load": round(t_loaded - t_start, 1), "data": round(t_data - t_loaded, 1),
                              "train": round(t_train - t_data, 1), "total": round(t_train - t_start, 1)},
                  "command": "specdec " + " ".join(shlex.quote(a) for a in getattr(args, "argv", sys.argv[1:]))})
    save_artifact(args.out, layer.state_tensors(torch.float16), manifest)
    held = report["heldout"]
    print(f"saved {args.out}: held-out top-1 per step {held['top1']} (before {report['heldout_before']['top1']}), "
          f"greedy chain {held['chain_accepted']} accepted over {held['chain_windows']} windows; "
          f"{report['train_tokens']} training tokens, train {t_train - t_data:.0f} s")
    return 0


def add_parser(kinds) -> None:
    e = kinds.add_parser("eagle3", help="an EAGLE-3 draft layer (fused features, training-time test) from cached features")
    e.add_argument("--target", default="default", help="'default' (SmolLM2-135M), a HF directory or a .gguf file")
    e.add_argument("--features", nargs="+", required=True, help="feature cache folders (specdec train features)")
    e.add_argument("--out", required=True, help="artifact directory to write")
    e.add_argument("--name", default=None)
    e.add_argument("--device", default="auto", help="auto, cpu or cuda")
    e.add_argument("--max-tokens", type=int, default=None, help="read at most this many tokens of each cache")
    e.add_argument("--max-train-tokens", type=int, default=None,
                   help="train on the first N tokens of the training split only (learning curves; held-out unchanged)")
    e.add_argument("--vocab", type=int, default=8192, help="reduced drafting vocabulary size (0 = full)")
    e.add_argument("--steps", type=int, default=3, help="training-time-test depth (1 = teacher forcing only)")
    e.add_argument("--epochs", type=int, default=1)
    e.add_argument("--lr", type=float, default=1e-3)
    e.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per optimiser step")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--heldout-every", type=int, default=10, help="every N-th sequence is held out")
    e.add_argument("--top-k", type=int, default=8, help="drafting default: children per node / frontier width")
    e.add_argument("--max-depth", type=int, default=6, help="drafting default: deepest level")
    e.add_argument("--min-prob", type=float, default=1e-3, help="drafting default: stop below this path probability")
    e.set_defaults(func=eagle3_main)
