"""Micro-benchmarks of one operation against its baselines, same run: attention, linear, sampling, cache, suffix."""
