"""Measurement harnesses: what plans, reviews and benchmarks are built on.

:mod:`.speedup` (the ``specdec bench`` harness: plain against speculative decoding in one
process), :mod:`.proposer_stats` (a workload's greedy outputs, each proposer's acceptance and
memory), :mod:`.engine_calibration` (an engine's step times and acceptance seen from outside).
"""
