#!/usr/bin/env bash
# One prepared GPU session for the tree-attention kernel (H200, no internet): build the extension
# against the machine's torch, run the CUDA tests against the float64 reference, then benchmark the
# kernel vs SDPA (dense mask) and flex_attention (block mask). Logs go to $OUT (default
# ./gpu_out). Usage, from the repository root:  bash benchmarks/gpu/run_tree_attention.sh [--quick]
# build_ext --inplace (not pip install) so setup.py's torch pin can never make pip replace torch.
set -uo pipefail
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="8.0;9.0"
PY="${PYTHON:-python3}"
export PATH="$PATH:/usr/local/cuda/bin"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  "$PY" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  nvcc --version | tail -1
} 2>&1 | tee "$OUT/env.txt"

start=$SECONDS
"$PY" setup.py build_ext --inplace >"$OUT/build.log" 2>&1
rc=$?
echo "build rc=$rc in $((SECONDS - start)) s"
if [ $rc -ne 0 ]; then tail -60 "$OUT/build.log"; exit $rc; fi
"$PY" -c "import specdec._ext as e; assert e.load().cuda_built(), 'extension built without CUDA'; print('cuda_built OK')" || exit 1

start=$SECONDS
"$PY" -m pytest tests/test_tree_attention.py -q -x -m cuda -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" | tail -25
echo "cuda tests rc=${PIPESTATUS[0]} in $((SECONDS - start)) s"

if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    start=$SECONDS
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 "$PY" benchmarks/gpu/sanitize_tree_attention.py \
      >"$OUT/sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool rc=$? in $((SECONDS - start)) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)"
  done
fi

start=$SECONDS
"$PY" benchmarks/gpu/bench_tree_attention_gpu.py --out "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v '^{'
echo "bench rc=${PIPESTATUS[0]} in $((SECONDS - start)) s"
