#!/usr/bin/env bash
# Create .venv-llama: llama-cpp-python built from PyPI (a C++ build, a few minutes on 2 cores), for
# `specdec audit --engine llamacpp --python .venv-llama/bin/python`. The audit's llama.cpp worker and
# GGUF export are standalone scripts: this venv needs no torch and no specdec, only what they import.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-llama
.venv-llama/bin/pip install -q llama-cpp-python==0.3.36 gguf safetensors numpy
.venv-llama/bin/python -c "import llama_cpp, gguf, safetensors, numpy; print('llama-cpp-python', llama_cpp.__version__)"
