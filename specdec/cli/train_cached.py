"""What every trainer on the feature cache starts from: checked flags, the target, its cached features.

``specdec train eagle3 | heads-kd | draft-kd`` share it: they refuse bad flags and mismatched caches
before any model is loaded or any shard read, and record the same facts (caches, tokens, stage
times, the command line) in their manifests.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass


@dataclass
class CachedRun:
    device: str
    model: object
    tokenizer: object
    fingerprint: str
    data: object  # FeatureSet
    facts: list
    spec: dict
    t_start: float
    t_loaded: float
    t_data: float

    def seconds(self, t_train: float) -> dict:
        return {"load": round(self.t_loaded - self.t_start, 1), "data": round(self.t_data - self.t_loaded, 1),
                "train": round(t_train - self.t_data, 1), "total": round(t_train - self.t_start, 1)}


def command_line(args) -> str:
    return "specdec " + " ".join(shlex.quote(a) for a in getattr(args, "argv", sys.argv[1:]))


def start(args) -> CachedRun:
    """Check the flags and caches, load the target, read the caches (fingerprint-checked)."""
    from ..models import load_target
    from .common import resolve_device
    from ..training.features import load_many, read_meta

    for d in args.features:
        if not os.path.isdir(d):
            raise SystemExit(f"--features {d}: no such feature cache folder (run `specdec train features` first)")
    for name in ("max_tokens", "max_train_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.heldout_every < 2:
        raise SystemExit(f"--heldout-every must be >= 2, got {args.heldout_every}")
    spec = read_meta(args.features[0])["spec"]
    t_start = time.time()
    device = resolve_device(args.device)
    model, tok, _ = load_target(args.target, device=device)
    from ..artifacts import target_fingerprint

    fp = target_fingerprint(model)
    t_loaded = time.time()
    data, facts = load_many(args.features, fp, args.max_tokens)
    return CachedRun(device, model, tok, fp, data, facts, spec, t_start, t_loaded, time.time())


def add_common(p) -> None:
    p.add_argument("--target", "--model", dest="target", default="default",
                   help="'default' (SmolLM2-135M), a HF directory or a .gguf file")
    p.add_argument("--features", nargs="+", required=True, help="feature cache folders (specdec train features)")
    p.add_argument("--out", required=True, help="artifact directory to write")
    p.add_argument("--name", default=None)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--max-tokens", type=int, default=None, help="read at most this many tokens of each cache")
    p.add_argument("--max-train-tokens", type=int, default=None,
                   help="train on the first N tokens of the training split only (learning curves; held-out unchanged)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heldout-every", type=int, default=10, help="every N-th sequence is held out")
