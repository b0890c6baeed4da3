"""Benchmarks on vLLM (run in .venv-vllm): the drafter's step cost, served load, chain replays, the sampled law."""
