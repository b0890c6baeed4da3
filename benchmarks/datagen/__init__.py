"""Inputs the other benchmarks read: the target's greedy answers to the dev prompts."""
