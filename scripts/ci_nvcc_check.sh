#!/usr/bin/env bash
# CI stage: compile every CUDA source under csrc/ for sm_80 and sm_90 (-c only, nothing linked or
# run), and syntax-check every C++ source with a CUDA branch (those naming SPECDEC_WITH_CUDA: the
# CUDA launchers in csrc/ops/, the op registration and module entry in csrc/bindings/) with that
# macro defined, against the installed CPU torch's headers. Skips cleanly when nvcc is absent.
#
# Usage: scripts/ci_nvcc_check.sh   (env: PYTHON = the venv python with torch; NVCC)
# The full link against a CUDA torch is scripts/ci_cuda_build.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
PY="${PYTHON:-python}"
if [ ! -x "$NVCC" ]; then
  echo "ci_nvcc_check: nvcc not found, skipping"
  exit 0
fi
CUDA_INC="${CUDA_HOME:-/usr/local/cuda}/include"  # nvcc on PATH may be a wrapper script
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mapfile -t TORCH_INC < <("$PY" -c "from torch.utils.cpp_extension import include_paths; print('\n'.join(include_paths()))")
PY_INC="$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")"  # pybind11 needs Python.h
INC=(-I"$ROOT/csrc")
for d in "${TORCH_INC[@]}"; do INC+=(-I"$d"); done

echo "ci_nvcc_check: $("$NVCC" --version | tail -1)"
status=0
while IFS= read -r -d '' cu; do
  rel="${cu#"$ROOT"/}"
  if "$NVCC" -std=c++17 -O3 --use_fast_math -lineinfo -Xptxas -warn-spills \
      -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 \
      "${INC[@]}" -c "$cu" -o "$TMP/$(basename "$cu").o" 2>"$TMP/log"; then
    echo "  ok   $rel"
    grep -i "spill" "$TMP/log" || true
  else
    echo "  FAIL $rel"
    cat "$TMP/log"
    status=1
  fi
done < <(find "$ROOT/csrc" -name '*.cu' -print0 | sort -z)

# The CPU torch wheel lacks CUDA's generated cmake header; an empty stand-in suffices for a syntax check.
mkdir -p "$TMP/stub/c10/cuda/impl"
echo '#pragma once' >"$TMP/stub/c10/cuda/impl/cuda_cmake_macros.h"
while IFS= read -r -d '' cpp; do
  rel="${cpp#"$ROOT"/}"
  if g++ -std=c++17 -fsyntax-only -DSPECDEC_WITH_CUDA "${INC[@]}" -I"$PY_INC" -I"$CUDA_INC" -I"$TMP/stub" "$cpp" \
      2>"$TMP/log"; then
    echo "  ok   $rel (syntax, SPECDEC_WITH_CUDA)"
  else
    echo "  FAIL $rel"
    grep -v "Wc++20-extensions\|^ *[0-9]* |\|^ *|\|In file included\|from " "$TMP/log" | head -40
    status=1
  fi
done < <(grep -rlZ --include='*.cpp' SPECDEC_WITH_CUDA "$ROOT/csrc" | sort -z)
exit $status
