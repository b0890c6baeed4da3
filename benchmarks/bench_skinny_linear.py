"""Skinny linear vs ``F.linear`` on CPU, same run: per product set and per verify step.

Why: a verify step pushes ``1 + tree size`` rows through every linear layer and the LM head; on a
CPU the weights stream from DRAM, so the step should cost what a one-row step costs. Two parts:

* ``layers``: all linear products of one forward of a Llama-shaped model (default: SmolLM2-135M's
  shapes, 30 layers + the 49,152 x 576 LM head, 540 MB of float32 weights, so they stream from
  DRAM as in a real forward), by row count, ``F.linear`` vs :func:`specdec.ops.skinny_linear`.
* ``--model default``: the real target's verify step (:class:`~specdec.verify.hf.HFTarget`) by
  chain length, with ``skinny_linear=False`` vs ``True``, interleaved, fastest of ``--repeats``.
* ``--eagle DIR``: an EAGLE artifact's drafting on the default target (one request, the first dev
  prompt of ``--eagle-category``, budget ``--eagle-budget``): the draft layer's weights read as
  float32, then as the exact float16 copies (``ForwardPatch(half_weights=True)``), then also with
  the LM-head rows rounded to float16 (``DraftHead``, the default), interleaved draft by draft, with
  a 512 MB sweep before each draft so the layer comes from DRAM as after a verify step; medians.

The ``layers`` table also times the kernel on float16 copies of the same weights (half the bytes).

    python benchmarks/bench_skinny_linear.py [--threads 2] [--rows 1 2 4 8 16 32 64] [--model default]
        [--eagle artifacts/eagle3-smollm2-135m]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from specdec.ops.skinny_linear import skinny_linear


def layer_shapes(hidden: int, intermediate: int, kv: int, layers: int, vocab: int) -> list[tuple[int, int]]:
    """``(out, in)`` of every linear product of one forward (q, k, v, o, gate, up, down per layer)."""
    per_layer = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden),
                 (intermediate, hidden), (intermediate, hidden), (hidden, intermediate)]
    return per_layer * layers + [(vocab, hidden)]


def time_products(fn, weights, inputs, repeats: int) -> float:
    """Fastest of ``repeats`` passes over all weights, in ms (one warm-up pass first)."""
    best = float("inf")
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        for w in weights:
            fn(inputs[w.shape[1]], w)
        if r:
            best = min(best, time.perf_counter() - t0)
    return best * 1e3


def bench_layers(args) -> None:
    gen = torch.Generator().manual_seed(0)
    shapes = layer_shapes(args.hidden, args.intermediate, args.kv, args.layers, args.vocab)
    weights = [torch.randn(o, i, generator=gen) / i ** 0.5 for o, i in shapes]
    mb = sum(w.numel() for w in weights) * 4 / 2**20
    print(f"one forward's linear products: {len(weights)} weights, {mb:.0f} MB fp32, {args.threads} threads, "
          f"fastest of {args.repeats} (ms)")
    halves = [w.half() for w in weights]
    print(f"{'rows':>5} {'F.linear':>9} {'skinny':>8} {'ratio':>6}  {'skinny GB/s':>11} {'fp16 w':>7} {'vs fp32':>7}")
    for rows in args.rows:
        inputs = {k: torch.randn(rows, k, generator=gen) for k in {i for _, i in shapes}}
        a = time_products(lambda x, w: F.linear(x, w), weights, inputs, args.repeats)
        b = time_products(lambda x, w: skinny_linear(x, w, impl="op"), weights, inputs, args.repeats)
        c = time_products(lambda x, w: skinny_linear(x, w, impl="op"), halves, inputs, args.repeats)
        print(f"{rows:>5} {a:>9.2f} {b:>8.2f} {a / b:>6.2f}  {mb * 2**20 / (b / 1e3) / 1e9:>11.1f} {c:>7.2f} "
              f"{b / c:>7.2f}")


def bench_verify(args) -> None:
    from specdec.control.sizer import VerifyCostModel
    from specdec.models import load_default
    from specdec.verify.hf import HFTarget

    model, _ = load_default()
    targets = {"F.linear": HFTarget(model, skinny_linear=False), "skinny": HFTarget(model, skinny_linear=True)}
    best = {name: [float("inf")] * len(args.sizes) for name in targets}
    for _ in range(args.repeats):  # interleaved, so load bursts hit both alike
        for name, target in targets.items():
            cm = VerifyCostModel.calibrate(target, prefix_len=args.prefix, sizes=args.sizes, repeats=1)
            best[name] = [min(a, b) for a, b in zip(best[name], cm.seconds)]
    print(
        f"\nSmolLM2-135M verify step, prefix {args.prefix}, chain of n drafted tokens (ms, fastest of {args.repeats})"
    )
    print(f"{'n':>4} {'F.linear':>9} {'skinny':>8} {'ratio':>6} {'skinny vs n=0':>14}")
    for i, n in enumerate(args.sizes):
        a, b = best["F.linear"][i] * 1e3, best["skinny"][i] * 1e3
        print(f"{n:>4} {a:>9.1f} {b:>8.1f} {a / b:>6.2f} {b / (best['skinny'][0] * 1e3):>14.2f}")


def bench_eagle(args) -> None:
    import statistics

    from specdec.measure.speedup import load_prompts
    from specdec.models import load_default
    from specdec.proposers.registry import make_proposer
    from specdec.verify.hf import HFTarget

    model, tokenizer = load_default()
    prompt = load_prompts(args.prompts, tokenizer, categories=[args.eagle_category], per_category=1)[0].ids
    # (label, float16 layer copies, LM-head rows): what a release drafted with before each change.
    cases = [("fp32 weights, fp32 head", False, "float32"), ("fp16 copies, fp32 head", True, "float32"),
             ("fp16 copies, fp16 head", True, "float16")]
    props = {}
    for label, half, head_dtype in cases:
        prop = make_proposer(f"eagle:{args.eagle}", model, tokenizer, head_dtype=head_dtype)
        prop._linears.half_weights = half
        if not props:  # what the decoder passes
            _, _, hidden = HFTarget(model, hidden_layers=prop.target_layers).prefill([prompt])
        prop.begin("r", prompt, target_hidden=hidden[0])
        prop.cache_length("r")  # feed the prompt now, outside the timing
        props[label] = prop
    sweep = torch.empty(128 * 2**20)  # 512 MB: the target's forward evicts the layer between drafts
    times = {label: [] for label in props}
    for _ in range(args.repeats * 10):
        for label, prop in props.items():
            sweep.add_(1.0)
            t0 = time.perf_counter()
            prop.propose(["r"], args.eagle_budget)
            times[label].append(time.perf_counter() - t0)
    med = {label: statistics.median(t) * 1e3 for label, t in times.items()}
    base = med[cases[0][0]]
    print(f"\nEAGLE drafting, {args.eagle}, budget {args.eagle_budget}, {len(times[cases[0][0]])} drafts each, "
          "median ms (ratio against the first row)")
    for label, prop in props.items():
        mb = (prop._linears.extra_bytes + prop.head.nbytes) / 2**20
        print(f"{label:>24} {med[label]:>7.2f} ms {base / med[label]:>5.2f}x  ({mb:.1f} MB of copies and rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 64])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--kv", type=int, default=192, help="K/V projection width (kv heads x head dim)")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--model", choices=["default"], help="also time the real target's verify step")
    ap.add_argument("--sizes", type=int, nargs="+", default=[0, 1, 2, 4, 8, 16, 32])
    ap.add_argument("--prefix", type=int, default=256)
    ap.add_argument("--eagle", metavar="DIR", help="also time an EAGLE artifact's drafting, fp32 vs fp16 weights")
    ap.add_argument("--eagle-budget", type=int, default=32)
    ap.add_argument("--eagle-category", default="writing",
                    help="the dev category whose first prompt is drafted from (summarization: a long context)")
    ap.add_argument("--prompts", default="../shared/data/prompts_dev.jsonl")
    ap.add_argument("--skip-layers", action="store_true", help="skip the synthetic layers table")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.skip_layers:
        bench_layers(args)
    if args.model:
        bench_verify(args)
    if args.eagle:
        bench_eagle(args)


if __name__ == "__main__":
    main()
