"""Acceptance against training tokens: the EAGLE-3 layer trained on growing prefixes of the feature cache.

For each ``--sizes`` entry (training tokens; the held-out split is the same every time) one
``train_eagle3`` run with the same hyper-parameters and seed, then:

* held-out teacher-forced metrics on the cache (top-1 agreement per training-time-test step,
  greedy-chain acceptance);
* exact greedy replay (:func:`specdec.measure.greedy_replay.replay_sequence`) of the target's own answers
  to a dev-prompt subset at a fixed budget: tokens per step, the issue's metric.

A least-squares fit ``tokens/step = a + b * ln(training tokens)`` over the sizes gives the
extrapolated training tokens a goal would need (``--goal``, default 3.0): an extrapolation of a
fitted trend, reported as such. Writes ``--json``.

    python -m benchmarks.training.learning_curve \\
        --features benchmarks/data/features-<fp>-sharegpt-L2-15-27-k16-len512 --sizes 60000 120000 240000 \\
        --prompts ../shared/data/prompts_dev.jsonl --per-category 1

``--merge earlier.json`` adds the points of an earlier run with the same training settings and
replay (refused otherwise), so a grown cache adds a point without retraining the small sizes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

from benchmarks.common.answers import Features, greedy_outputs
from benchmarks.common.paths import DATA
from benchmarks.common.report import accepted_histogram, depth_acceptance, save_json
from specdec.artifacts import Artifact, target_fingerprint
from specdec.measure.greedy_replay import replay_sequence
from specdec.measure.speedup import load_prompts
from specdec.proposers.eagle import EagleProposer
from specdec.proposers.eagle3_layer import Eagle3Config
from specdec.training.eagle3 import Eagle3TrainConfig, train_eagle3
from specdec.training.features import load_many, read_meta


def fit_log(xs, ys):
    """``(a, b)`` of ``y = a + b ln x`` by least squares."""
    lx = [math.log(x) for x in xs]
    mx, my = sum(lx) / len(lx), sum(ys) / len(ys)
    b = sum((u - mx) * (v - my) for u, v in zip(lx, ys)) / max(sum((u - mx) ** 2 for u in lx), 1e-12)
    return my - b * mx, b


def artifact_point(directory: str, model, cfg: Eagle3TrainConfig):
    """``(proposer, training report)`` of a saved artifact, refused unless trained like the curve's runs."""
    from dataclasses import asdict

    from specdec.artifacts import read_manifest

    waited = 0
    while not os.path.isfile(os.path.join(directory, "manifest.json")):  # still being trained by another process
        if waited == 0:
            print(f"waiting for {directory} (being trained) ...", flush=True)
        time.sleep(30)
        waited += 30
    trained = read_manifest(directory).training["config"]
    differ = {k: (trained.get(k), v) for k, v in asdict(cfg).items() if k != "seed" and trained.get(k) != v}
    if differ:
        raise SystemExit(f"--artifact {directory} was trained with other settings (artifact, curve): {differ}")
    return EagleProposer.load(directory, model), read_manifest(directory).training


def merged_points(path: str, args) -> list[dict]:
    """The points of an earlier run, each marked ``merged_from``; refused unless its training
    settings and replay match this run's (else the curve would mix two experiments)."""
    with open(path) as f:
        old = json.load(f)
    want = {"epochs": args.epochs, "steps": args.steps, "vocab": args.vocab, "lr": args.lr}
    if old.get("config") != want or old.get("replay_budget") != args.replay_budget:
        raise SystemExit(f"--merge {path}: its settings {old.get('config')} / replay budget "
                         f"{old.get('replay_budget')} differ from this run's {want} / {args.replay_budget}")
    return [{**p, "merged_from": path, "replay_prompts": old.get("prompts")} for p in old["points"]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--features", nargs="+", required=True)
    ap.add_argument("--sizes", type=int, nargs="*", default=[], help="training tokens per run (>= 3 points in all)")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--replay-budget", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--goal", type=float, default=3.0)
    ap.add_argument("--artifact", default=None,
                    help="also measure this `specdec train eagle3` artifact as a point (same hyper-parameters)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 is steadier on a shared machine)")
    ap.add_argument("--merge", default=None, help="an earlier --json of this script whose points join this curve")
    args = ap.parse_args(argv)
    earlier = merged_points(args.merge, args) if args.merge else []
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if len(args.sizes) + bool(args.artifact) + len(earlier) < 3 or sorted(args.sizes) != args.sizes:
        raise SystemExit("--sizes (plus --artifact and --merge) needs >= 3 increasing token counts "
                         "(a curve, not a point)")
    from specdec.models import load_default

    model, tok = load_default()
    fp = target_fingerprint(model)
    spec = read_meta(args.features[0])["spec"]
    data, facts = load_many(args.features, fp)
    prompts = load_prompts(args.prompts, tok, per_category=args.per_category)
    if any(p.get("replay_prompts", len(prompts)) != len(prompts) for p in earlier):
        raise SystemExit(f"--merge {args.merge}: its replay used another number of prompts than {len(prompts)}")
    cache = str(DATA / f"greedy-{fp}-{len(prompts)}x{args.max_new_tokens}.json")
    outputs = greedy_outputs(model, prompts, args.max_new_tokens, [tok.eos_token_id], cache)
    layers = tuple(spec["layers"])
    feats = Features(model)
    emb, lm = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    cfg = Eagle3TrainConfig(reduced_vocab=args.vocab, steps=args.steps, epochs=args.epochs, lr=args.lr,
                            batch_tokens=args.batch_tokens)
    runs = [("train", size) for size in args.sizes] + ([("artifact", args.artifact)] if args.artifact else [])
    points = []
    for how, what in runs:
        load0 = os.getloadavg()[0]
        if how == "artifact":
            prop, rep = artifact_point(what, model, cfg)
        else:
            layer, rep = train_eagle3(data, emb, lm, model.get_decoder().norm.weight,
                                      Eagle3Config.from_target(model.config, layers), cfg, max_train_tokens=what,
                                      progress=False)
            prop = EagleProposer(layer, emb, lm, Artifact("curve", "target", fp))
        e = s = 0
        hist = [0] * (args.replay_budget + 1)
        t0 = time.time()
        for p in prompts:
            ids = p.ids + outputs[str(p.question_id)]
            r = replay_sequence(prop, ids, len(p.ids), args.replay_budget,
                                hidden=feats.get(layers, str(p.question_id), ids))
            h = accepted_histogram(r.accepted, args.replay_budget)
            e, s, hist = e + r.emitted, s + r.steps, [x + y for x, y in zip(hist, h)]
        point = {"source": how, "train_tokens": rep["train_tokens"], "train_seconds": rep["train_seconds"],
                 "load": round(load0, 2), "heldout": rep["heldout"], "replay_tok_per_step": round(e / max(s, 1), 3),
                 "depth_acceptance": depth_acceptance(hist), "replay_seconds": round(time.time() - t0, 1)}
        points.append(point)
        print(json.dumps({k: point[k] for k in ("train_tokens", "train_seconds", "replay_tok_per_step")}),
              point["heldout"]["top1"], flush=True)
    points = sorted(points + earlier, key=lambda p: p["train_tokens"])
    a, b = fit_log([p["train_tokens"] for p in points], [p["replay_tok_per_step"] for p in points])
    need = math.exp((args.goal - a) / b) if b > 0 else None
    result = {"features": facts, "prompts": len(prompts), "replay_budget": args.replay_budget,
              "config": {"epochs": args.epochs, "steps": args.steps, "vocab": args.vocab, "lr": args.lr},
              "points": points, "fit": {"a": round(a, 4), "b_per_ln_token": round(b, 4)},
              "goal": args.goal, "extrapolated_tokens_for_goal": None if need is None else float(f"{need:.3g}")}
    print(f"fit: tok/step = {a:.3f} + {b:.3f} ln(tokens); goal {args.goal} needs ~{need and f'{need:.3g}'} tokens "
          f"(extrapolated)")
    save_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
