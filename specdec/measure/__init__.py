"""Measurement harnesses: what plans, reviews and benchmarks are built on.

:mod:`.speedup` (the ``specdec bench`` harness: plain against speculative decoding in one
process), :mod:`.proposer_stats` (a workload's greedy outputs, each proposer's acceptance and
memory), :mod:`.greedy_replay` (the one greedy replay loop over recorded answers),
:mod:`.step_timing` (the target's step times, calibrated).
"""
