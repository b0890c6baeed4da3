"""Per-request cost of one vLLM drafter step: specdec's batched C++ path against per-request calls.

State of the issue's measurement: every request has an 8k-token context, the global cache holds
1M tokens of past responses (synthetic traffic of benchmarks/kernels/suffix.py: shared Zipf
phrases, vocabulary 49,152), and each step every row commits 1-4 tokens (what vLLM's rejection
sampler emits) before the drafter is called with the whole batch. Measured, in one process and
interleaved per step so load hits all alike:

* ``specdec batched``: ``SuffixRowBatch.step`` -- row matching (full memcmp of every row), commits,
  global-match upkeep, best-first tree (``--tree-budget`` nodes, default k as in the drafter) and its
  best chain, for all rows in one C++ call;
  plus the list conversion ``SuffixDrafter.propose`` does around it;
* ``SuffixDrafter.propose``: what vLLM calls, all of it: the batched call above plus the load
  gate's decision and bookkeeping (``use_global`` on, the same warmed cache; ``--paths drafter``);
* ``specdec batched, k=0``: the same call drafting nothing (identity + commits + match upkeep only),
  to split the batched cost into bookkeeping and drafting;
* ``specdec per-request``: the same proposer through ``RowSession`` (begin/commit/propose_scored per
  request from Python), what the drafter does for any other proposer;
* ``arctic speculate``: ArcticInference's ``SuffixDecodingCache`` (vLLM's ``method="suffix"``), one
  ``add_active_response`` + ``speculate`` per request, when ``arctic_inference`` imports.

Script: python -m benchmarks.vllm.bench_propose [--batch 32] [--context 8192] [--global-tokens 1000000]
pytest: pytest benchmarks/vllm/bench_propose.py --benchmark-enable (smaller state, pytest-benchmark table)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

from benchmarks.common.paths import ROOT
from benchmarks.kernels.suffix import VOCAB, Traffic
from specdec import SuffixProposer
from specdec.proposers.suffix_options import SuffixDrafting, SuffixGlobalCache
from specdec.integrations.rows import RowSession
from specdec.integrations.vllm.drafter import SuffixDrafter

K = 4
TREE = K  # the drafter's default tree budget (DrafterOptions.tree_budget: num_speculative_tokens)


class Rows:
    """A vLLM-like persistent batch: token matrix, committed lengths, each row's future tokens."""

    def __init__(self, traffic: Traffic, batch: int, context: int, steps: int):
        width = context + (K + 1) * steps + 1
        self.future = [traffic.document(width) for _ in range(batch)]
        self.tokens = np.zeros((batch, width), dtype=np.int32)
        self.n = np.full(batch, context, dtype=np.int32)
        for r, doc in enumerate(self.future):
            self.tokens[r, :context] = doc[:context]
        self.rng = np.random.default_rng(1)
        self.sampled = [[] for _ in range(batch)]  # first call: prompts, nothing sampled

    def advance(self) -> None:
        for r, doc in enumerate(self.future):
            m = int(self.rng.integers(1, K + 1))
            n = int(self.n[r])
            self.tokens[r, n : n + m] = doc[n : n + m]
            self.n[r] = n + m
            self.sampled[r] = doc[n : n + m].tolist()


class _Drafter(SuffixDrafter):
    """The vLLM drafter with the benchmark's global cache (1 GB cap, fed by warm); no log lines."""

    OPTIONS = {"use_global": True, "global_cache_bytes": 1 << 30, "log_every": 0}


def make_proposer(traffic: Traffic, global_tokens: int) -> SuffixProposer:
    prop = SuffixProposer(VOCAB, drafting=SuffixDrafting(max_depth=K),
                          cache=SuffixGlobalCache(use_global=True, global_cache_bytes=1 << 30))
    prop.warm(make_docs(traffic, global_tokens))
    return prop


ARCTIC_PACKAGE = ROOT / ".arctic" / "site" / "arctic_inference"  # what scripts/build_arctic_suffix.sh builds


def arctic_cache():
    """``(SuffixDecodingCache, "")`` of ArcticInference, from the environment or else from .arctic/site
    (scripts/build_arctic_suffix.sh: the package is loaded from its folder by name, the path left as it
    is); ``(None, why)`` when neither has it."""
    try:
        if importlib.util.find_spec("arctic_inference") is None and (ARCTIC_PACKAGE / "__init__.py").is_file():
            spec = importlib.util.spec_from_file_location("arctic_inference", ARCTIC_PACKAGE / "__init__.py",
                                                          submodule_search_locations=[str(ARCTIC_PACKAGE)])
            module = importlib.util.module_from_spec(spec)
            sys.modules["arctic_inference"] = module  # what an import does; its submodules resolve from the folder
            spec.loader.exec_module(module)
        suffix = importlib.import_module("arctic_inference.suffix_decoding")
    except ImportError as exc:
        sys.modules.pop("arctic_inference", None)
        return None, f"arctic_inference not importable ({exc})"
    return suffix.SuffixDecodingCache, ""


PATHS = {"batched": "specdec batched", "drafter": "SuffixDrafter.propose", "k0": "specdec batched, k=0",
         "per-request": "specdec per-request", "arctic": "arctic speculate"}


def run(batch: int, context: int, global_tokens: int, steps: int, seed: int = 0, tree: int = TREE,
        paths=tuple(PATHS)) -> dict:
    """Per path (``PATHS`` keys): p50 / mean microseconds per request per step and drafted tokens.
    Paths run interleaved step by step, each on its own copy of the state, so with several of them
    every path finds the caches cold after the others, as a drafter does after the model's forward."""
    cases = []  # (name, step function, rows)

    def rows():
        return Rows(Traffic(seed + 1), batch, context, steps)

    def sampled_of(r):
        return np.fromiter((len(s) for s in r.sampled), np.int32, batch)

    if "batched" in paths:
        fast = make_proposer(Traffic(seed), global_tokens).row_batch(tree_budget=tree)

        def fast_step(r):
            offsets, flat, _ = fast.step(r.tokens, r.n, sampled_of(r), K)
            flat, b = flat.tolist(), offsets.tolist()
            return [flat[b[i]:b[i + 1]] for i in range(batch)]
        cases.append((PATHS["batched"], fast_step, rows()))
    if "drafter" in paths:
        drafter_rows = rows()  # vLLM's token_ids_cpu is max_model_len wide
        model_config = SimpleNamespace(get_vocab_size=lambda: VOCAB, max_model_len=drafter_rows.tokens.shape[1])
        drafter = _Drafter(SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=K),
                                           model_config=model_config))
        drafter.proposer.warm(make_docs(Traffic(seed), global_tokens))
        cases.append((PATHS["drafter"], lambda r: drafter.propose(r.sampled, r.n, r.tokens), drafter_rows))
    if "k0" in paths:
        keep = make_proposer(Traffic(seed), global_tokens).row_batch(tree_budget=tree)

        def keep_step(r):
            keep.step(r.tokens, r.n, sampled_of(r), 0)
            return []
        cases.append((PATHS["k0"], keep_step, rows()))
    if "per-request" in paths:
        slow = RowSession(make_proposer(Traffic(seed), global_tokens), tree_budget=tree)
        cases.append((PATHS["per-request"], lambda r: slow.step(r.tokens, r.n, sampled_of(r), K).chains, rows()))
    skipped = {}
    if "arctic" in paths:
        cache_cls, why = arctic_cache()
        if cache_cls is None:
            skipped[PATHS["arctic"]] = {"skipped": why}
        else:
            # vLLM's method="suffix" defaults (config/speculative.py): depth 24, 10000 cached requests,
            # spec factor 1.0, min token prob 0.1; its proposer matches the last max_tree_depth tokens.
            arctic = cache_cls(max_tree_depth=24, max_cached_requests=10000)
            rows_arctic = rows()
            for i, doc in enumerate(make_docs(Traffic(seed), global_tokens)):
                arctic.start_request(f"g{i}", doc[:1])
                arctic.add_active_response(f"g{i}", doc[1:].tolist())
                arctic.stop_request(f"g{i}")
            for r in range(batch):
                arctic.start_request(f"r{r}", rows_arctic.tokens[r, :context])

            def arctic_step(rw):
                out = []
                for r in range(batch):
                    if rw.sampled[r]:
                        arctic.add_active_response(f"r{r}", rw.sampled[r])
                    n = int(rw.n[r])
                    draft = arctic.speculate(f"r{r}", rw.tokens[r, max(0, n - 24):n], max_spec_tokens=K,
                                             max_spec_factor=1.0, min_token_prob=0.1)
                    out.append(list(draft.token_ids))
                return out
            cases.append((PATHS["arctic"], arctic_step, rows_arctic))
    times = {name: [] for name, _, _ in cases}
    drafted = {name: 0 for name, _, _ in cases}
    for step in range(steps + 1):
        for name, fn, r in cases:
            t0 = time.perf_counter_ns()
            chains = fn(r)
            dt = (time.perf_counter_ns() - t0) / 1e3 / batch
            if step > 0:  # step 0 begins every request (8k-token prompts): reported apart
                times[name].append(dt)
                drafted[name] += sum(len(c) for c in chains)
            r.advance()
    out = {name: {"p50_us_per_request": statistics.median(v), "mean_us_per_request": statistics.fmean(v),
                  "drafted_per_request_step": drafted[name] / (len(v) * batch)} for name, v in times.items()}
    out.update(skipped)
    return out


def make_docs(traffic: Traffic, global_tokens: int):
    done = 0
    while done < global_tokens:
        doc = traffic.document(int(traffic.rng.integers(100, 1000)))
        done += doc.size
        yield doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--global-tokens", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--paths", default=",".join(PATHS),
                    help="which paths run, interleaved (one path alone runs with warm caches)")
    ap.add_argument("--tree-budget", type=int, default=TREE,
                    help=f"nodes of the tree each chain is cut from (default {TREE}: the drafter's default, k; "
                         "16 was the default before 2026-12-01)")
    args = ap.parse_args(argv)
    for name, value in (("batch", args.batch), ("context", args.context), ("steps", args.steps)):
        if value < 1:
            ap.error(f"--{name} must be >= 1")
    if args.tree_budget < K:
        ap.error(f"--tree-budget must be >= k = {K}")
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not paths or set(paths) - set(PATHS):
        ap.error(f"--paths takes a comma-separated subset of {','.join(PATHS)}, got {args.paths!r}")
    load = os.getloadavg()
    res = run(args.batch, args.context, args.global_tokens, args.steps, tree=args.tree_budget, paths=paths)
    print(f"batch {args.batch}, context {args.context}, global cache {args.global_tokens} tokens, {args.steps} steps, "
          f"k={K}, tree {args.tree_budget}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("| path | p50 us / request / step | mean | drafted tokens / request / step |")
    print("|---|---:|---:|---:|")
    for name, r in res.items():
        if "skipped" in r:
            print(f"| {name} | skipped: {r['skipped']} | | |")
        else:
            print(f"| {name} | {r['p50_us_per_request']:.2f} | {r['mean_us_per_request']:.2f} | "
                  f"{r['drafted_per_request_step']:.2f} |")
    base = res.get("arctic speculate", {})
    if "p50_us_per_request" in base and "specdec batched" in res:
        ratio = base["p50_us_per_request"] / res["specdec batched"]["p50_us_per_request"]
        print(f"speedup over arctic speculate: {ratio:.1f}x")


def test_batched_step(benchmark):
    """pytest-benchmark: one batched step of 8 rows at a 1k context and a 50k-token global cache."""
    traffic = Traffic(0)
    prop = make_proposer(traffic, 50_000)
    rows = Rows(Traffic(1), 8, 1024, 400)
    batch = prop.row_batch(tree_budget=TREE)

    def step():
        sampled = np.fromiter((len(s) for s in rows.sampled), np.int32, 8)
        batch.step(rows.tokens, rows.n, sampled, K)
        rows.advance()

    benchmark.pedantic(step, rounds=300, iterations=1, warmup_rounds=1)


if __name__ == "__main__":
    main()
