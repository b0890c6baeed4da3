"""``specdec train eagle3``: an EAGLE-3 draft layer from cached teacher-forced features.

Reads one or more feature caches (``specdec train features``: ShareGPT conversations, self-distilled
answers), trains with training-time test (:mod:`.eagle3`), writes a bound artifact. Everything the
run used (caches, tokens, hyper-parameters, held-out metrics, stage times) goes into the manifest.
"""

from __future__ import annotations

import time


def eagle3_main(args) -> int:
    import torch

    from ..artifacts import Manifest, save_artifact, tokenizer_fingerprint
    from ..proposers.eagle3_layer import Eagle3Config
    from .train_cached import command_line, start
    from ..training.eagle3 import Eagle3TrainConfig, train_eagle3

    cfg = Eagle3TrainConfig(reduced_vocab=args.vocab, steps=args.steps, epochs=args.epochs, lr=args.lr,
                            batch_tokens=args.batch_tokens, seed=args.seed)
    run = start(args)
    model, data = run.model, run.data
    data.fused = data.fused.to(run.device)
    layer_cfg = Eagle3Config.from_target(model.config, run.spec["layers"])
    layer, report = train_eagle3(data, model.get_input_embeddings().weight, model.get_output_embeddings().weight,
                                 model.get_decoder().norm.weight, layer_cfg, cfg, heldout_every=args.heldout_every,
                                 max_train_tokens=args.max_train_tokens)
    layer = layer.cpu()
    t_train = time.time()
    manifest = Manifest(
        kind="eagle", name=args.name or "eagle3-1layer", bound_to="target", fingerprint=run.fingerprint,
        config={"architecture": "eagle3", "layer": layer.config.to_dict(),
                "vocab_size": int(model.get_output_embeddings().weight.shape[0]),
                "reduced_vocab": 0 if layer.vocab_ids is None else int(layer.vocab_ids.numel()),
                "drafting": {"top_k": args.top_k, "max_depth": args.max_depth, "min_prob": args.min_prob},
                "stored_dtype": "float16", "tokenizer_fingerprint": tokenizer_fingerprint(run.tokenizer)},
        training={**report, "features": run.facts, "feature_spec": run.spec, "device": run.device,
                  "torch": torch.__version__, "seconds": run.seconds(t_train), "command": command_line(args)})
    save_artifact(args.out, layer.state_tensors(torch.float16), manifest)
    held = report["heldout"]
    print(f"saved {args.out}: held-out top-1 per step {held['top1']} (before {report['heldout_before']['top1']}), "
          f"greedy chain {held['chain_accepted']} accepted over {held['chain_windows']} windows; "
          f"{report['train_tokens']} training tokens, train {t_train - run.t_data:.0f} s")
    return 0


def add_parser(kinds) -> None:
    from .train_cached import add_common

    e = kinds.add_parser("eagle3", help="an EAGLE-3 draft layer (fused features, training-time test) from the cache")
    add_common(e)
    e.add_argument("--vocab", type=int, default=8192, help="reduced drafting vocabulary size (0 = full)")
    e.add_argument("--steps", type=int, default=3, help="training-time-test depth (1 = teacher forcing only)")
    e.add_argument("--lr", type=float, default=1e-3)
    e.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per optimiser step")
    e.add_argument("--top-k", type=int, default=8, help="drafting default: children per node / frontier width")
    e.add_argument("--max-depth", type=int, default=6, help="drafting default: deepest level")
    e.add_argument("--min-prob", type=float, default=1e-3, help="drafting default: stop below this path probability")
    e.set_defaults(func=eagle3_main)
