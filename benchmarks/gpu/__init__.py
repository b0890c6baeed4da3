"""Benchmarks that need a GPU (run from the repo root: python -m benchmarks.gpu.<name>; scripts/gpu/run.sh runs them)."""
