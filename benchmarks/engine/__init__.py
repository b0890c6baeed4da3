"""Benchmarks of the decoding loop and its entry points."""
