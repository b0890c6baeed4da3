#!/usr/bin/env bash
# CI stage: prove the whole extension (csrc/: the CUDA and CPU kernels, their launchers, the suffix
# automaton, and the bindings that register the CUDA launcher) compiles and links against a CUDA
# build of torch before it ever meets a GPU, then import it where CUDA is unavailable and run the
# CPU op once against the reference.
#
# Uses the CUDA 13.0 build of torch 2.14.1 that lies on local disk, in a separate venv, installed
# with --no-index (nothing is downloaded). Its CUDA libraries come from the local nvidia-* wheels
# (pinned to cuda-toolkit 13.0.3's versions). Two of torch's declared dependencies are skipped on
# purpose: cuda-bindings (no local wheel; not needed to build or import) and triton (not needed).
# The build runs in a copy of the checkout so the developer's CPU build of specdec._C is untouched.
#
# Usage: scripts/ci_cuda_build.sh            (env: CI_CUDA_VENV, CI_CUDA_WORK, PYTHON, MAX_JOBS)
# Needs: nvcc (CUDA 13.0) on PATH or in /usr/local/cuda, python3.11, ~6 GB free disk.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${CI_CUDA_VENV:-/tmp/specdec-cuda-venv}"
WORK="${CI_CUDA_WORK:-/tmp/specdec-cuda-build}"
PY="${PYTHON:-python3.11}"
WHEEL="${TORCH_CUDA_WHEEL:-/opt/pypi-more/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl}"
LOCAL_INDEXES=(--no-index --find-links /opt/pypi-more/files --find-links /opt/wheels
               --find-links /opt/pypi/files)
export PIP_CONSTRAINT=""  # the machine-wide cap (torch<=2.14.1) is honoured anyway; nothing else pins
start=$SECONDS

# torch derives CUDA_HOME from `which nvcc`, wrong when nvcc is a wrapper script outside the toolkit
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
command -v nvcc >/dev/null || export PATH="$CUDA_HOME/bin:$PATH"
command -v nvcc >/dev/null || { echo "ci_cuda_build: nvcc not found, skipping"; exit 0; }
[ -f "$WHEEL" ] || { echo "ci_cuda_build: $WHEEL missing"; exit 1; }

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch; assert torch.__version__.startswith('2.14.1')" 2>/dev/null; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q "${LOCAL_INDEXES[@]}" --no-deps "$WHEEL" \
    cuda-toolkit==13.0.3 cuda-pathfinder nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.1.1.3 \
    nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-cupti==13.0.85 nvidia-cufft==12.0.0.61 nvidia-cufile==1.15.1.6 \
    nvidia-curand==10.4.0.35 nvidia-cusolver==12.0.4.66 nvidia-cusparse==12.6.3.3 nvidia-nvjitlink \
    nvidia-nvtx==13.0.85 nvidia-cudnn-cu13==9.24.0.43 nvidia-cusparselt-cu13==0.8.1 \
    nvidia-nccl-cu13==2.30.7 nvidia-nvshmem-cu13==3.4.5
  "$VENV/bin/pip" install -q "${LOCAL_INDEXES[@]}" filelock typing-extensions sympy networkx jinja2 fsspec \
    "setuptools>=77.0.3" wheel numpy pybind11 ninja
  echo "ci_cuda_build: venv ready in $((SECONDS - start)) s"
fi
"$VENV/bin/python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"

rm -rf "$WORK"
mkdir -p "$WORK"
(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) | tar -xf - -C "$WORK"
build_start=$SECONDS
(cd "$WORK" && MAX_JOBS="${MAX_JOBS:-2}" TORCH_CUDA_ARCH_LIST="8.0;9.0" "$VENV/bin/python" setup.py build_ext --inplace >build.log 2>&1) \
  || { tail -80 "$WORK/build.log"; echo "ci_cuda_build: BUILD FAILED"; exit 1; }
echo "ci_cuda_build: extension built in $((SECONDS - build_start)) s"

(cd "$WORK" && "$VENV/bin/python" - <<'EOF'
import importlib

import torch

from specdec import _ext

C = _ext.load()
assert C.cuda_built(), "specdec._C was built without its CUDA kernels"
assert not torch.cuda.is_available()
ta = importlib.import_module("specdec.ops.tree_attention")
gen = torch.Generator().manual_seed(0)
q = torch.randn(1, 3, 4, 64, generator=gen)
k = torch.randn(1, 10, 2, 64, generator=gen)
v = torch.randn(1, 10, 2, 64, generator=gen)
mask = torch.tensor([[[1], [3], [5]]], dtype=torch.int64)  # node 0 root, 1 child of 0, 2 child of 0
prefix = torch.tensor([6], dtype=torch.int32)
out = torch.ops.specdec.tree_attention(q, k, v, mask, prefix, None)
ref = ta.tree_attention_reference(q, k, v, mask, prefix)
torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
print("ci_cuda_build: CUDA-built extension imports; CPU op matches the reference")
EOF
)
echo "ci_cuda_build: OK in $((SECONDS - start)) s"
