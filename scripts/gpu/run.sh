#!/usr/bin/env bash
# The whole GPU agenda (issue 34) in one prepared script, for a lent H200 with no network:
#   1. build the extension with CUDA for sm_90; run every test that skips without CUDA (-m cuda)
#   2. the decoder on CUDA with SmolLM2-135M in bf16 and fp16: greedy equal to model.generate on the
#      dev prompts, the decoder law test, plain / suffix / hybrid / EAGLE-3 at batch 1 and 8
#      (benchmarks/gpu/decoder_cuda.py)
#   3. the verify op on decode-tree shapes against SDPA (dense mask), flex_attention (block mask) and
#      the roofline, a torch.profiler table and an ncu report of the worst case
#      (benchmarks/gpu/bench_tree_attention_gpu.py)
#   4. self-distillation (SmolLM2 answers ShareGPT first turns, batched, on the GPU) and EAGLE-3 +
#      Medusa-KD trained on features computed online (`specdec train online`), fp16 artifacts
#   5. summary.md + results.json (every figure, the commands, versions, wall time per step)
# Each step runs under its own cap (timeout), records its rc and wall time, and a failure costs only
# that step. Results go to --out DIR: summary.md, results.json, logs.tar.gz and the two artifact
# folders (eagle3-gpu/, medusa-kd-gpu/): 7 files, each under 16 MB, two folders deep at most.
#
# THE CALLS. Each call sends the working tree plus the carried folder, 64 MiB in all; the payload
# is the GGUF xz-compressed (86.2 MiB; 93.8 unpacked) + transformers 5.24 trimmed to the model
# folders the run imports (1.4 MiB, scripts/gpu/trim_site.py; the machine has 5.17) + the gguf
# wheel (0.1 MiB) + the ShareGPT prompt token ids (1.0 MiB): 88.8 MiB. scripts/gpu/prepare.sh (run
# here, with network) splits it into .gpu-carry/call1 .. callN, N as small as the tree allows, and
# refuses N > MAX_CALLS (2). With the tree at 15.8 MiB N is 2 (it may grow by 2.8 MiB before N is 3).
# Every call stashes its share in $SPECDEC_GPU_STATE (/tmp/specdec-gpu on the machine), which
# survives between calls while the machine stays up (~30 s: issue the next call at once). Work per
# call:
#   call N-1: stash (+ install the wheel and the trimmed tree into the state folder), build, CUDA
#             tests, verify op, ncu
#   call N  : stash, join + check + unpack the GGUF, convert it, train (step 4), decoder (step 2), summary
#   earlier calls (only when N > 2): stash only, a few seconds each
# Caps (seconds, env CAP_<STEP> overrides): build 90, tests 90, verify 130, ncu 30 (call N-1: 340 s);
# model 50, train 190, decoder 130, summary 20 (call N: 390 s); 730 s = 12.2 min of caps in all.
#
# HOW TO RUN (from the repository root; see docs/performance.md, "GPU agenda: how to run"):
#   here:        bash scripts/gpu/prepare.sh            (once; writes .gpu-carry/, git-excluded)
#   device calls, K = 1 .. N, each at once after the last:
#                run(command="bash scripts/gpu/run.sh --call K --out $OUT", carry=[".gpu-carry/callK"],
#                    timeout_s=60 for a stash-only call, 420 for call N-1, 460 for call N)
#   CI / no GPU: bash scripts/gpu/run.sh --smoke --out DIR  (every step on the CPU at toy sizes:
#                both calls in one process, a toy payload split the same way; tests/scripts/)
# Without --call, every prepared call runs in turn in one invocation (a machine that holds it all).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
OUT="" CALL="" SMOKE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="${2:-}"; shift 2 ;;
    --call) CALL="${2:-}"; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "run.sh: --out DIR is required" >&2; exit 2; }
case "$CALL" in ""|[1-9]) ;; *) echo "run.sh: --call takes a call number 1-9, got '$CALL'" >&2; exit 2 ;; esac
[ "$SMOKE" = 1 ] && [ -n "$CALL" ] && { echo "run.sh: --smoke runs every call itself; drop --call" >&2; exit 2; }
PY="${PYTHON:-python3}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
BASE_PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH="$BASE_PYTHONPATH"
export PATH="$PATH:/usr/local/cuda/bin"

if [ "$SMOKE" = 1 ]; then
  # toy sizes: one thread each (intra-op threads only contend on a small shared machine)
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
  STATE="$(mktemp -d "${TMPDIR:-/tmp}/specdec-gpu-smoke.XXXXXX")"
  DEVICE=cpu CARRY="$STATE/carry"
  "$PY" scripts/gpu/toy_payload.py --out "$STATE/payload" >/dev/null || { echo "run.sh: toy payload failed" >&2; exit 1; }
  LIMIT=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['smoke_limit_bytes'])" "$STATE/payload/payload.json")
  "$PY" scripts/gpu/carry.py write --lock "$STATE/payload/payload.json" --files "$STATE/payload" --out "$CARRY" \
    --tree-bytes 0 --margin-bytes 0 --limit-bytes "$LIMIT" >"$STATE/carry.log" 2>&1 \
    || { cat "$STATE/carry.log" >&2; echo "run.sh: toy carry failed" >&2; exit 1; }
  : "${CAP_BUILD:=60}" "${CAP_TESTS:=120}" "${CAP_VERIFY:=90}" "${CAP_NCU:=30}" "${CAP_MODEL:=30}" \
    "${CAP_TRAIN:=120}" "${CAP_DECODER:=150}" "${CAP_SUMMARY:=20}"
else
  STATE="${SPECDEC_GPU_STATE:-/tmp/specdec-gpu}"
  DEVICE=cuda CARRY="$ROOT/.gpu-carry"
  export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"  # torch reads it off `which nvcc` otherwise
  : "${CAP_BUILD:=90}" "${CAP_TESTS:=90}" "${CAP_VERIFY:=130}" "${CAP_NCU:=30}" "${CAP_MODEL:=50}" \
    "${CAP_TRAIN:=190}" "${CAP_DECODER:=130}" "${CAP_SUMMARY:=20}"
fi
[ -f "$CARRY/call1/manifest.json" ] || { echo "run.sh: $CARRY/call1/manifest.json missing: run scripts/gpu/prepare.sh here first" >&2; exit 2; }
NCALLS=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['calls'])" "$CARRY/call1/manifest.json")
if [ -n "$CALL" ] && [ "$CALL" -gt "$NCALLS" ]; then echo "run.sh: --call $CALL but the payload has $NCALLS calls" >&2; exit 2; fi
mkdir -p "$STATE/results" "$STATE/logs"
MODEL_FILE="$STATE/model_path"
FAILED=""

# step NAME CAP CMD...: run under a cap, log to $LOGS/NAME.log, record rc and wall time.
step() {
  local name=$1 cap=$2; shift 2
  local t0=$SECONDS rc
  echo "== call $K: $name (cap ${cap}s)"
  timeout --kill-after=10 "$cap" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  "$PY" scripts/gpu/summary.py record --state "$STATE" --call "$K" --name "$name" --rc "$rc" \
    --seconds "$((SECONDS - t0))" --cap "$cap" --command "$*"
  echo "   rc=$rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || { FAILED="$FAILED $K:$name"; tail -n 15 "$LOGS/$name.log" | sed 's/^/   | /'; }
  return $rc
}

with_site() {  # the carried wheels, installed into the state folder, win over the machine's packages
  if [ -d "$STATE/site" ]; then export PYTHONPATH="$ROOT:$STATE/site${PYTHONPATH#"$ROOT"}"; fi
}

model_free_steps() {
  if [ "$DEVICE" = cuda ]; then
    if ! "$PY" -c "import specdec._ext as e, sys; sys.exit(0 if e.load().cuda_built() else 1)" 2>/dev/null; then
      step build "$CAP_BUILD" env MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 "$PY" setup.py build_ext --inplace
    fi
    step cuda_check 20 "$PY" -c "import specdec._ext as e; assert e.load().cuda_built(), 'built without CUDA'; print('cuda_built')"
    step cuda_tests "$CAP_TESTS" "$PY" -m pytest tests -m cuda -q -p no:cacheprovider --continue-on-collection-errors
    step verify "$CAP_VERIFY" "$PY" -m benchmarks.gpu.bench_tree_attention_gpu --seconds "$((CAP_VERIFY - 40))" \
      --flex-seconds "$((CAP_VERIFY - 50))" --out "$STATE/results/verify.json" --profile "$LOGS/verify_profile.txt" \
      --worst "$STATE/results/worst.json"
    if command -v ncu >/dev/null && [ -f "$STATE/results/worst.json" ]; then
      local shape
      shape=$("$PY" -c "import json,sys; w=json.load(open(sys.argv[1])); print(f\"{w['batch']},{w['prefix']},{w['nodes']}\")" "$STATE/results/worst.json")
      step ncu "$CAP_NCU" ncu --clock-control none --kernel-name regex:tree_attention --launch-count 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section Occupancy --log-file "$LOGS/ncu_worst.txt" \
        "$PY" -m benchmarks.gpu.bench_tree_attention_gpu --only "$shape" --kernel-only
    fi
    if [ "${GPU_SANITIZER:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
      for tool in memcheck racecheck; do
        step "$tool" 60 compute-sanitizer --tool "$tool" --error-exitcode 9 "$PY" -m benchmarks.gpu.sanitize_tree_attention
      done
    fi
  else  # smoke: the CPU build is what there is; the CUDA selection must still resolve
    step cuda_check 20 "$PY" -c "import specdec._ext as e; e.load(); print('extension imports (CPU build)')"
    step cuda_tests "$CAP_TESTS" "$PY" -m pytest tests -m cuda -q -p no:cacheprovider --collect-only
    step verify "$CAP_VERIFY" "$PY" -m benchmarks.gpu.bench_tree_attention_gpu --device cpu --smoke --seconds 30 \
      --out "$STATE/results/verify.json" --profile "$LOGS/verify_profile.txt" --worst "$STATE/results/worst.json"
  fi
}

model_steps() {
  step model "$CAP_MODEL" bash -c '
    set -e
    f=$("$0" scripts/gpu/carry.py join --state "$1")
    case "$f" in
      *.tar) mkdir -p "$1/model"; tar xf "$f" -C "$1/model"; m="$1/model/$(tar tf "$f" | head -1 | cut -d/ -f1)" ;;
      *) m="$f" ;;
    esac
    SPECDEC_CACHE="$1/cache" "$0" -c "import sys; from specdec.models import load_target; load_target(sys.argv[1]); print(\"converted\", sys.argv[1])" "$m"
    echo "$m" > "$2"' "$PY" "$STATE" "$MODEL_FILE" || return 0
  local model eagle3 common
  model=$(cat "$MODEL_FILE")
  export SPECDEC_CACHE="$STATE/cache"
  if [ "$DEVICE" = cuda ]; then
    step train "$CAP_TRAIN" "$PY" -m specdec.cli train online --target "$model" --device cuda --dtype bf16 --amp bf16 \
      --prompt-ids "$STATE/stash/prompt_ids.npz" --max-new-tokens 256 --gen-batch 1024 --gen-seconds 55 \
      --max-len 512 --batch-tokens 32768 --train-tokens 10500000 --train-seconds 90 --heldout-tokens 50000 \
      --eagle3-out "$OUT/eagle3-gpu" --medusa-out "$OUT/medusa-kd-gpu" \
      --report "$STATE/results/train.json" --no-progress
    step decoder "$CAP_DECODER" "$PY" -m benchmarks.gpu.decoder_cuda --model "$model" --device cuda --dtypes bf16,fp16 \
      --eagle3 artifacts/eagle3-smollm2-135m --extra-eagle3 "$OUT/eagle3-gpu" --max-prompts 8 --max-new-tokens 96 \
      --batch 8 --out "$STATE/results/decoder.json"
  else
    step train "$CAP_TRAIN" "$PY" -m specdec.cli train online --target "$model" --device cpu \
      --prompt-ids "$STATE/stash/prompt_ids.npz" --max-new-tokens 12 --gen-batch 16 --gen-seconds 30 --max-len 64 \
      --layers 1,2,3 --top-k 8 --batch-tokens 256 --train-tokens 3000 --train-seconds 30 --heldout-every 5 \
      --vocab 32 --steps 2 --heads 2 --medusa-vocab 0 --max-depth 3 --eagle3-out "$OUT/eagle3-gpu" \
      --medusa-out "$OUT/medusa-kd-gpu" --report "$STATE/results/train.json" --no-progress
    step decoder "$CAP_DECODER" "$PY" -m benchmarks.gpu.decoder_cuda --model "$model" --device cpu --dtypes bf16,fp16 \
      --eagle3 "$OUT/eagle3-gpu" --max-prompts 3 --max-new-tokens 8 --batch 3 --law-trials 30 \
      --out "$STATE/results/decoder.json"
  fi
}

do_call() {
  K=$1
  LOGS="$STATE/logs/call$K"
  mkdir -p "$LOGS"
  local t0=$SECONDS
  echo "=== call $K of $NCALLS ($DEVICE), state $STATE, out $OUT"
  step stash 60 "$PY" scripts/gpu/carry.py stash --call "$CARRY/call$K" --state "$STATE"
  "$PY" scripts/gpu/summary.py env --state "$STATE" --call "$K" --command "bash scripts/gpu/run.sh${CALL:+ --call $CALL}$([ "$SMOKE" = 1 ] && echo ' --smoke') --out <OUT>" >"$LOGS/env.json" 2>&1
  if compgen -G "$STATE/stash/*.whl" >/dev/null || compgen -G "$STATE/stash/*.site.tar.xz" >/dev/null; then
    [ -f "$STATE/site/.installed" ] || step site 60 bash -c 'set -e; mkdir -p "$1/site"
      if compgen -G "$1/stash/*.whl" >/dev/null; then
        "$0" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$1/site" "$1"/stash/*.whl
      fi
      for t in "$1"/stash/*.site.tar.xz; do [ -e "$t" ] && tar xJf "$t" -C "$1/site"; done
      touch "$1/site/.installed"' "$PY" "$STATE"
  fi
  with_site
  # the same check on both: the transformers specdec sees is one it accepts (the carried 5.24 on the GPU)
  local carried="import gguf; print('gguf', version('gguf'))"
  [ "$DEVICE" = cuda ] || carried="import specdec_smoke_wheel as w, specdec_smoke_site as t; \
assert w.INSTALLED and t.EXTRACTED and version('specdec-smoke-site') == '0.0.1'; print(w.__file__, t.__file__)"
  step site_check 30 "$PY" -c "from importlib.metadata import version; import transformers; \
from specdec._imports import require_transformers; require_transformers('the GPU run'); \
print('transformers', transformers.__version__, transformers.__file__); $carried"
  if [ "$K" -eq "$((NCALLS - 1))" ] || [ "$NCALLS" -eq 1 ]; then model_free_steps; fi
  if [ "$K" -eq "$NCALLS" ]; then model_steps; fi
  step summary "$CAP_SUMMARY" "$PY" scripts/gpu/summary.py write --state "$STATE" --out "$OUT"
  tar czf "$OUT/logs.tar.gz" -C "$STATE" logs results 2>/dev/null
  "$PY" scripts/gpu/summary.py check-out "$OUT"
  echo "=== call $K done in $((SECONDS - t0)) s"
}

if [ -n "$CALL" ]; then
  do_call "$CALL"
else
  for k in $(seq 1 "$NCALLS"); do do_call "$k"; done
fi
if [ "$SMOKE" = 1 ]; then
  if [ -z "$FAILED" ]; then rm -rf "$STATE"; else echo "run.sh: smoke state kept for a look: $STATE" >&2; fi
fi
head -n 30 "$OUT/summary.md"
if [ -n "$FAILED" ]; then echo "run.sh: failed steps (call:step):$FAILED" >&2; exit 1; fi
exit 0
