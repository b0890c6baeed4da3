"""Suffix proposer speed and memory, against Hugging Face prompt lookup and pure-Python n-gram lookup.

Measured in one run on the same token streams:

* ``propose``: SuffixProposer core (``build_suffix_draft``, C++ via pybind11) and full
  ``SuffixProposer.propose`` (adds Python bookkeeping and DraftTree construction); HF
  ``PromptLookupCandidateGenerator.get_candidates``; a pure-Python scan implementing HF's rule on
  lists; a pure-Python incremental n-gram index (dict of last positions).
* ``append``: time per committed token (``SuffixProposer.commit`` of one token; raw
  ``SuffixAutomaton.extend``; the Python index update).
* memory: bytes per indexed token of the global cache (automaton + the int32 copy of the documents
  kept for rebuilds).

Per-request contexts of 1k / 8k / 64k tokens and a global cache of 1M tokens (defaults). Token
streams are synthetic, vocabulary 49,152 (SmolLM2's): documents mix phrases from a shared Zipf-
distributed phrase library (templated / agentic traffic repeats phrases across requests) with
Zipf-distributed free tokens, so both caches find matches of realistic lengths.

Script:  python -m benchmarks.kernels.suffix [--global-tokens N] [--contexts 1024 8192 65536] [--json out.json]
pytest:  pytest benchmarks/kernels/suffix.py --benchmark-enable   (smaller sizes, pytest-benchmark tables)
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time

import numpy as np
import torch

from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixGlobalCache
from specdec.proposers.suffix_automaton import SuffixAutomaton, build_suffix_draft

VOCAB = 49152
HF_TOKENS = 10  # HF prompt lookup defaults: 10 output tokens, n-gram size <= 2
HF_NGRAM = 2


# ---------------------------------------------------------------- synthetic traffic
class Traffic:
    """Token documents drawn from a shared phrase library (seeded, reproducible)."""

    def __init__(self, seed: int = 0, n_phrases: int = 5000):
        self.rng = np.random.default_rng(seed)
        self.phrases = [self._free(int(self.rng.integers(4, 40))) for _ in range(n_phrases)]

    def _free(self, n: int) -> np.ndarray:
        return (self.rng.zipf(1.2, size=n) % VOCAB).astype(np.int32)

    def document(self, n_tokens: int) -> np.ndarray:
        parts, total = [], 0
        while total < n_tokens:
            if self.rng.random() < 0.6:
                part = self.phrases[int(self.rng.zipf(1.5)) % len(self.phrases)]
            else:
                part = self._free(int(self.rng.integers(1, 20)))
            parts.append(part)
            total += part.size
        return np.concatenate(parts)[:n_tokens]


# ---------------------------------------------------------------- baselines
class PyNgramScan:
    """HF's prompt-lookup rule on Python lists: first earlier match of the last n-gram, n = 2 then 1."""

    def __init__(self, ids):
        self.ids = list(ids)

    def append(self, tok: int) -> None:
        self.ids.append(tok)

    def propose(self) -> list[int]:
        ids, n_ids = self.ids, len(self.ids)
        for n in range(min(HF_NGRAM, n_ids - 1), 0, -1):
            tail = ids[n_ids - n :]
            for i in range(n_ids - n):
                if ids[i : i + n] == tail:
                    out = ids[i + n : i + n + HF_TOKENS]
                    if out:
                        return out
        return []


class PyNgramIndex:
    """Incremental pure-Python index: last position of every 1..3-gram; drafts after the longest."""

    def __init__(self, ids, max_n: int = 3):
        self.ids: list[int] = []
        self.max_n = max_n
        self.last: dict[tuple, int] = {}
        self.prev: dict[tuple, int] = {}
        for t in ids:
            self.append(int(t))

    def append(self, tok: int) -> None:
        self.ids.append(tok)
        end = len(self.ids)
        for n in range(1, min(self.max_n, end) + 1):
            key = tuple(self.ids[end - n :])
            if key in self.last:
                self.prev[key] = self.last[key]
            self.last[key] = end

    def propose(self) -> list[int]:
        end = len(self.ids)
        for n in range(min(self.max_n, end), 0, -1):
            pos = self.prev.get(tuple(self.ids[end - n :]))
            if pos is not None:
                return self.ids[pos : pos + HF_TOKENS]
        return []


# ---------------------------------------------------------------- timing helpers
def timed(fn, reps: int) -> list[float]:
    """Per-call wall times in microseconds."""
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1e3)
    return out


def summary(us: list[float]) -> dict:
    q = statistics.quantiles(us, n=10) if len(us) > 1 else us * 9
    return {"p50_us": statistics.median(us), "p90_us": q[8], "mean_us": statistics.fmean(us), "n": len(us)}


def build_global(prop: SuffixProposer, traffic: Traffic, n_tokens: int) -> float:
    """Index ``n_tokens`` of finished responses; returns seconds per indexed token."""
    t0 = time.perf_counter()
    done, i = 0, 0
    while done < n_tokens:
        doc = traffic.document(int(traffic.rng.integers(100, 1000)))
        prop.begin(("g", i), doc[:1])
        prop.commit(("g", i), doc[1:])
        prop.end(("g", i))
        done += doc.size - 1
        i += 1
    return (time.perf_counter() - t0) / done


def bench_context(prop: SuffixProposer, traffic: Traffic, ctx_len: int, steps: int, hf_steps: int, budget: int) -> dict:
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    stream = traffic.document(ctx_len + steps)
    prompt, future = stream[:ctx_len], stream[ctx_len:]
    rid = ("bench", ctx_len)
    prop.begin(rid, prompt)
    core, full, commit_us, extend_us, nodes = [], [], [], [], []
    rules = prop.drafting
    one = np.zeros(1, dtype=np.int32)
    for s in range(steps):
        # Re-matches the global cache when needed, so the timed calls measure the steady state.
        sources = list(prop.match_sources(rid).values())
        core += timed(lambda: build_suffix_draft(sources, budget, rules.min_match_len, rules.min_prob,
                                                 rules.max_depth, rules.depth_factor), 1)
        full += timed(lambda: prop.propose([rid], budget), 1)
        nodes.append(prop.propose([rid], budget)[0].num_nodes)
        tok = int(future[s])
        commit_us += timed(lambda: prop.commit(rid, [tok]), 1)
    prop.end(rid)
    raw = SuffixAutomaton(VOCAB)
    raw.extend(prompt)
    for s in range(steps):
        one[0] = future[s]
        extend_us += timed(lambda: raw.extend(one), 1)

    buf = torch.from_numpy(stream.astype(np.int64)).unsqueeze(0)
    hf = PromptLookupCandidateGenerator(num_output_tokens=HF_TOKENS, max_matching_ngram_size=HF_NGRAM,
                                        max_length=ctx_len + steps + 16, vocab_size=VOCAB)
    hf_us = []
    for s in range(hf_steps):
        view = buf[:, : ctx_len + s]
        hf_us += timed(lambda: hf.get_candidates(view), 1)

    scan = PyNgramScan(prompt.tolist())
    scan_us = []
    for s in range(min(hf_steps, steps)):
        scan_us += timed(scan.propose, 1)
        scan.append(int(future[s]))
    index = PyNgramIndex(prompt.tolist())
    index_us, index_append_us = [], []
    for s in range(steps):
        index_us += timed(index.propose, 1)
        tok = int(future[s])
        index_append_us += timed(lambda: index.append(tok), 1)
    out = {
        "context": ctx_len,
        "suffix_core_propose": summary(core),
        "suffix_full_propose": summary(full),
        "suffix_commit_1_token": summary(commit_us),
        "automaton_extend_1_token": summary(extend_us),
        "mean_draft_nodes": statistics.fmean(nodes),
        "hf_prompt_lookup": summary(hf_us),
        "py_ngram_scan": summary(scan_us),
        "py_ngram_index": summary(index_us),
        "py_ngram_index_append": summary(index_append_us),
    }
    out["speedup_core_vs_hf_p50"] = out["hf_prompt_lookup"]["p50_us"] / out["suffix_core_propose"]["p50_us"]
    out["speedup_full_vs_hf_p50"] = out["hf_prompt_lookup"]["p50_us"] / out["suffix_full_propose"]["p50_us"]
    return out


def run(global_tokens: int, contexts: list[int], steps: int, hf_steps: int, budget: int) -> dict:
    traffic = Traffic(seed=0)
    prop = SuffixProposer(VOCAB, cache=SuffixGlobalCache(global_cache_bytes=4 << 30))
    build_s_per_token = build_global(prop, traffic, global_tokens)
    stats = prop.global_stats()
    result = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''} torch {torch.__version__}".strip(),
        "global_tokens": stats["tokens"],
        "global_bytes_per_token_total": stats["bytes"] / stats["tokens"],
        "global_bytes_per_token_automaton": stats["automaton_bytes"] / stats["indexed_tokens"],
        "global_states_per_token": stats["states"] / stats["indexed_tokens"],
        "global_index_us_per_token": build_s_per_token * 1e6,
        "budget": budget,
        "contexts": [bench_context(prop, traffic, c, steps, hf_steps, budget) for c in contexts],
    }
    return result


def print_report(r: dict) -> None:
    print(f"date {r['date_utc']}  machine {r['machine']}")
    print(f"global cache: {r['global_tokens']} tokens, {r['global_bytes_per_token_total']:.1f} B/token "
          f"({r['global_bytes_per_token_automaton']:.1f} automaton), {r['global_states_per_token']:.2f} states/token, "
          f"indexing {r['global_index_us_per_token']:.2f} us/token")
    head = ("context", "core p50", "core p90", "full p50", "HF p50", "scan p50", "index p50", "commit p50",
            "extend p50", "nodes", "HF/core", "HF/full")
    print(" | ".join(f"{h:>10}" for h in head))
    for c in r["contexts"]:
        row = (
            c["context"],
            c["suffix_core_propose"]["p50_us"],
            c["suffix_core_propose"]["p90_us"],
            c["suffix_full_propose"]["p50_us"],
            c["hf_prompt_lookup"]["p50_us"],
            c["py_ngram_scan"]["p50_us"],
            c["py_ngram_index"]["p50_us"],
            c["suffix_commit_1_token"]["p50_us"],
            c["automaton_extend_1_token"]["p50_us"],
            c["mean_draft_nodes"],
            c["speedup_core_vs_hf_p50"],
            c["speedup_full_vs_hf_p50"],
        )
        print(" | ".join(f"{v:>10.2f}" if isinstance(v, float) else f"{v:>10}" for v in row))
    print("(times in microseconds per call)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--global-tokens", type=int, default=1_000_000)
    ap.add_argument("--contexts", type=int, nargs="+", default=[1024, 8192, 65536])
    ap.add_argument("--steps", type=int, default=2000, help="timed propose/commit steps per context")
    ap.add_argument("--hf-steps", type=int, default=200, help="timed steps for the O(context) baselines")
    ap.add_argument("--budget", type=int, default=HF_TOKENS, help="draft node budget (HF drafts 10 tokens)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    r = run(args.global_tokens, args.contexts, args.steps, args.hf_steps, args.budget)
    print_report(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)


# ---------------------------------------------------------------- pytest-benchmark mode (smaller sizes)
def _setup(global_tokens=100_000, ctx_len=8192):
    traffic = Traffic(seed=1)
    prop = SuffixProposer(VOCAB, cache=SuffixGlobalCache(global_cache_bytes=1 << 30))
    build_global(prop, traffic, global_tokens)
    stream = traffic.document(ctx_len + 1)
    prop.begin("r", stream[:ctx_len])
    return prop, stream


def test_bench_suffix_propose_8k(benchmark):
    prop, _ = _setup()
    benchmark(prop.propose, ["r"], HF_TOKENS)


def test_bench_suffix_commit_one_token(benchmark):
    prop, stream = _setup()
    benchmark(prop.commit, "r", stream[-1:])


def test_bench_hf_prompt_lookup_8k(benchmark):
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    _, stream = _setup(global_tokens=1000)
    ids = torch.from_numpy(stream[:-1].astype(np.int64)).unsqueeze(0)
    hf = PromptLookupCandidateGenerator(
        num_output_tokens=HF_TOKENS, max_matching_ngram_size=HF_NGRAM, max_length=ids.shape[1] + 16, vocab_size=VOCAB
    )
    benchmark(hf.get_candidates, ids)


if __name__ == "__main__":
    main()
