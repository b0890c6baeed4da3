"""Benchmarks that need a GPU.

Run from the repo root as ``python -m benchmarks.gpu.<name>``; ``scripts/gpu/run.sh`` runs them all.
"""
