"""What the distillation label costs: keeping the target's top-k vs recomputing its distribution.

Times, on the same ShareGPT sequences in one process (alternating, ``--repeats`` rounds):

* ``forward``: the teacher-forced target forward with the fused hidden states (what any cache needs);
* ``+ top-k``: the same plus the LM head over every position and the top-k (what the cache stores;
  the LM head is what recomputing the label would cost again every epoch);

and reports bytes per token of a cache on disk (``--cache``: a ``specdec train features`` folder)
against a full fp16 distribution, plus the mean top-k probability mass there.

    python -m benchmarks.training.feature_cache --cache benchmarks/data/features-<fp>-sharegpt-L2-15-27-k16-len512
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from specdec.models import load_default
from specdec.training.data import decoder_of
from specdec.training.features import FeatureSpec, extract_one, load_features, read_meta
from specdec.training.sources import sharegpt_sequences


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--sequences", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    meta = read_meta(args.cache)
    spec = FeatureSpec(tuple(meta["spec"]["layers"]), meta["spec"]["top_k"], meta["spec"]["max_len"])
    model, tok = load_default()
    seqs, _ = sharegpt_sequences(tok, spec.max_len, limit=args.sequences)
    tokens = sum(len(s.ids) for s in seqs)
    times = {"forward": 0.0, "forward + top-k": 0.0}
    load0 = os.getloadavg()[0]
    with torch.inference_mode():
        for _ in range(args.repeats):
            for s in seqs:
                t0 = time.perf_counter()
                out = decoder_of(model)(input_ids=torch.tensor([s.ids]), output_hidden_states=True)
                torch.cat([out.hidden_states[i][0] for i in spec.layers], -1).half()
                t1 = time.perf_counter()
                extract_one(model, s.ids, spec, "cpu")
                t2 = time.perf_counter()
                times["forward"] += t1 - t0
                times["forward + top-k"] += t2 - t1
    n = tokens * args.repeats
    data = load_features(args.cache)
    shards = [f for f in os.listdir(args.cache) if f.endswith(".safetensors")]
    disk = sum(os.path.getsize(os.path.join(args.cache, f)) for f in shards)
    V = model.get_output_embeddings().weight.shape[0]
    print(f"{len(seqs)} ShareGPT sequences, {tokens} tokens x {args.repeats}; "
          f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}; threads {torch.get_num_threads()}")
    for k, v in times.items():
        print(f"  {k:16s} {n / v:7.1f} tokens/s")
    print(f"  the LM head + top-k adds {times['forward + top-k'] / times['forward'] - 1:.0%} to the forward")
    print(f"cache {args.cache}: {data.tokens.numel()} tokens, {disk / data.tokens.numel():.0f} bytes/token on disk "
          f"(top-{spec.top_k} label {spec.top_k * 6} B of it; a full fp16 distribution would be {2 * V} B); "
          f"top-{spec.top_k} mass mean {data.report()['mass_mean']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
