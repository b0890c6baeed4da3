"""Where the benchmarks find their inputs and put their outputs, from the checkout's root."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
DATA = ROOT / "benchmarks" / "data"  # git-ignored inputs and outputs: greedy answers, feature caches
RESULTS = ROOT / "benchmarks" / "results"  # git-ignored reports
DEV_PROMPTS = ROOT.parent / "shared" / "data" / "prompts_dev.jsonl"  # ../shared beside the checkout
SAMPLE_PROMPTS = ROOT / "specdec" / "data" / "prompts_dev_sample.jsonl"  # the sample shipped in the package
