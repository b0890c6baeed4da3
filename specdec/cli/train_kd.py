"""``specdec train heads-kd | draft-kd``: Medusa heads and the drafter distilled from the feature cache.

Both read the caches ``specdec train features`` wrote (the target's final hidden states and top-k
distributions), so a refit re-uses one teacher-forced pass for every proposer.
"""

from __future__ import annotations

import time


def heads_kd_main(args) -> int:
    import torch

    from ..artifacts import Manifest, save_artifact, tokenizer_fingerprint
    from .train_cached import command_line, start
    from ..training.medusa import HeadsTrainConfig
    from ..training.medusa_kd import train_medusa_kd, unmeasured_heads
    from .common import log

    cfg = HeadsTrainConfig(num_heads=args.heads, num_layers=args.layers, reduced_vocab=args.vocab,
                           epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, seed=args.seed)
    run = start(args)
    lm_weight = run.model.get_output_embeddings().weight.detach().float()
    run.data.final = run.data.final.to(run.device)
    heads, report = train_medusa_kd(run.data, lm_weight, cfg, heldout_every=args.heldout_every,
                                    max_train_tokens=args.max_train_tokens)
    heads = heads.cpu()
    t_train = time.time()
    manifest = Manifest(
        kind="medusa", name=args.name or f"medusa-kd-{cfg.num_heads}x{cfg.num_layers}", bound_to="target",
        fingerprint=run.fingerprint,
        config={"hidden_size": heads.hidden_size, "num_heads": cfg.num_heads, "num_layers": cfg.num_layers,
                "vocab_size": int(lm_weight.shape[0]),
                "reduced_vocab": 0 if heads.vocab_ids is None else int(heads.vocab_ids.numel()),
                "rank_acc": report["heldout"]["rank_acc"],
                "tokenizer_fingerprint": tokenizer_fingerprint(run.tokenizer)},
        training={**report, "features": run.facts, "device": run.device, "torch": torch.__version__,
                  "seconds": run.seconds(t_train), "command": command_line(args)})
    if (blind := unmeasured_heads(report["heldout"])):
        log(f"warning: heads {blind} saw no held-out greedy window, so their rank accuracies are unmeasured "
            "(0) and the static tree will not reach them: the artifact drafts nothing there; hold out more "
            "data (--heldout-every) or train on the target's own answers")
    save_artifact(args.out, heads.state_tensors(), manifest)
    print(f"saved {args.out}: heads top-1 (held-out greedy windows) {report['heldout']['top1']}, "
          f"{report['train_tokens']} training tokens, train {t_train - run.t_data:.0f} s")
    return 0


def draft_kd_main(args) -> int:
    import torch

    from ..artifacts import save_artifact, tokenizer_fingerprint
    from .train_cached import command_line, start
    from ..training.distilled_drafter import DrafterTrainConfig, drafter_manifest, own_tensors, small_drafter
    from ..training.drafter_kd import train_drafter_kd

    cfg = DrafterTrainConfig(num_layers=args.layers, epochs=args.epochs, lr=args.lr, batch_size=1, seed=args.seed)
    run = start(args)
    drafter = small_drafter(run.model, cfg.num_layers)
    report = train_drafter_kd(drafter, run.data, cfg, heldout_every=args.heldout_every,
                              batch_tokens=args.batch_tokens, max_train_tokens=args.max_train_tokens)
    t_train = time.time()
    report.update({"features": run.facts, "device": run.device, "target_fingerprint": run.fingerprint,
                   "torch": torch.__version__, "seconds": run.seconds(t_train), "stored_dtype": "float16",
                   "command": command_line(args)})
    manifest = drafter_manifest(drafter, run.model, tokenizer_fingerprint(run.tokenizer), report,
                                args.name or f"drafter-kd-{cfg.num_layers}L")
    save_artifact(args.out, {k: v.half() for k, v in own_tensors(drafter).items()}, manifest)
    print(f"saved {args.out}: held-out top-1 {report['heldout']['top1']} (before {report['heldout_before']['top1']}), "
          f"{report['train_tokens']} training tokens, train {t_train - run.t_data:.0f} s")
    return 0


def add_parsers(kinds) -> None:
    from .train_cached import add_common

    h = kinds.add_parser("heads-kd", help="Medusa heads distilled from cached target distributions")
    add_common(h)
    h.add_argument("--heads", type=int, default=4)
    h.add_argument("--layers", type=int, default=1)
    h.add_argument("--vocab", type=int, default=8192, help="reduced drafting vocabulary size (0 = full)")
    h.add_argument("--lr", type=float, default=1e-3)
    h.add_argument("--batch-size", type=int, default=256, help="positions per optimiser step")
    h.set_defaults(func=heads_kd_main)
    d = kinds.add_parser("draft-kd", help="the small drafter distilled from cached target distributions")
    add_common(d)
    d.add_argument("--layers", type=int, default=2, help="decoder layers of the drafter")
    d.add_argument("--lr", type=float, default=5e-4)
    d.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per optimiser step")
    d.set_defaults(func=draft_kd_main)
