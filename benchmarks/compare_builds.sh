#!/usr/bin/env bash
# Compare two commits' compiled kernels on this CPU: the verify-step cost curve of SmolLM2
# (benchmarks.kernels.verify_attention, SDPA path) and one forward's linear products
# (benchmarks.kernels.skinny_linear).
#
# Two builds of the extension cannot load into one process, so a same-process ratio is impossible;
# instead each commit is built in its own git worktree and the runs ALTERNATE (A B A B ...), so load
# drift hits both alike. Report the fastest time per size over the rounds.
#
#   bash benchmarks/compare_builds.sh BASE_REV [NEW_REV=HEAD] [ROUNDS=2]
#   bash benchmarks/compare_builds.sh BASE_REV NEW_REV ROUNDS bench [specdec bench options...]
#   bash benchmarks/compare_builds.sh BASE_REV NEW_REV ROUNDS eagle [kernels.skinny_linear --eagle options...]
#   bash benchmarks/compare_builds.sh BASE_REV NEW_REV ROUNDS propose [vllm.bench_propose options...]
#   bash benchmarks/compare_builds.sh BASE_REV NEW_REV ROUNDS trained [engine.trained_proposers options...]
#
# The second form alternates whole `specdec bench` runs instead (same options for both commits,
# each round's report under /tmp/specdec-builds/<rev>-bench-<round>/) and prints each run's overall
# table: an end-to-end before/after of a refactor, with the machine's load in every header.
# The third form alternates EAGLE-3 drafting timings (benchmarks.kernels.skinny_linear --skip-layers --eagle
# artifacts/eagle3-smollm2-135m --threads 1, each commit's own script): Python changes to drafting.
# The fourth alternates the vLLM drafter's propose-cost benchmark (benchmarks.vllm.bench_propose,
# this checkout's script against each commit's extension): C++ changes to the suffix automaton.
# The fifth alternates whole benchmarks.engine.trained_proposers runs (each commit's own script and
# committed artifacts, run from its worktree: give --prompts as an absolute path): Python changes to
# proposers and gates, end to end. Each run has its own plain and suffix baselines, so its speedups
# and vs-suffix ratios are same-run; the JSON goes to /tmp/specdec-builds/<rev>-trained-<round>.json
# and the per-category lines are printed.
#
# "Each commit's own script" runs as a module where the commit has the benchmarks package, else by the
# path it had before (commits older than the package layout). "This checkout's script" runs as a module
# from a folder holding only a link to this checkout's benchmarks/, so `benchmarks` comes from this
# checkout and `specdec` from the commit's worktree (PYTHONPATH): give file options as absolute paths.
#
# Uses the checkout's .venv (its torch); worktrees go to /tmp/specdec-builds/<rev>.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="$1"; NEW="${2:-HEAD}"; ROUNDS="${3:-2}"; WHAT="${4:-kernels}"
shift $(( $# < 4 ? $# : 4 )) || true
HERE="$PWD"
PY="$HERE/.venv/bin/python"
ROOT=/tmp/specdec-builds
mkdir -p "$ROOT/checkout-benchmarks"
ln -sfn "$HERE/benchmarks" "$ROOT/checkout-benchmarks/benchmarks"

# own DIR MODULE OLD_PATH [ARGS...]: the commit's own benchmark, against the commit's build
own() {
  local dir="$1" module="$2" old="$3"; shift 3
  if [ -f "$dir/benchmarks/__init__.py" ]; then
    (cd "$dir" && PYTHONPATH="$dir" "$PY" -m "$module" "$@")
  else
    (cd "$dir" && PYTHONPATH="$dir" "$PY" "$dir/benchmarks/$old" "$@")
  fi
}
# here DIR MODULE [ARGS...]: this checkout's benchmark, against the commit's build
here() {
  local dir="$1" module="$2"; shift 2
  (cd "$ROOT/checkout-benchmarks" && PYTHONPATH="$dir" "$PY" -m "$module" "$@")
}
dirs=()
for rev in "$BASE" "$NEW"; do
  sha=$(git rev-parse --short "$rev")
  dir="$ROOT/$sha"
  [ -d "$dir" ] || git worktree add -f --detach "$dir" "$sha" >/dev/null
  (cd "$dir" && "$PY" setup.py build_ext --inplace >"$dir/build.log" 2>&1) || { tail -30 "$dir/build.log"; exit 1; }
  # the worktree's own package must be the one imported, not the checkout's editable install
  (cd "$dir" && PYTHONPATH="$dir" "$PY" -c "import specdec, sys; assert specdec.__file__.startswith('$dir'), specdec.__file__")
  dirs+=("$dir")
done
for round in $(seq "$ROUNDS"); do
  for dir in "${dirs[@]}"; do
    echo "=== round $round: $(basename "$dir")"
    if [ "$WHAT" = bench ]; then
      out="$dir-bench-$round"
      (cd "$dir" && PYTHONPATH="$dir" "$PY" -c 'import sys; from specdec.cli import main; sys.exit(main(["bench", *sys.argv[1:]]))' \
        "$@" --out "$out" >"$out.log" 2>&1) || { tail -20 "$out.log"; exit 1; }
      sed -n '1,3p;/^### overall/,$p' "$out/bench.md"
    elif [ "$WHAT" = propose ]; then
      here "$dir" benchmarks.vllm.bench_propose "$@" 2>&1 | grep -E '^(batch|\| specdec|\| SuffixDrafter|\| arctic|speedup)'
    elif [ "$WHAT" = trained ]; then
      log="$dir-trained-$round.log"
      own "$dir" benchmarks.engine.trained_proposers trained_proposers.py "$@" \
        --json "$dir-trained-$round.json" >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
      grep -E '^(coding|extraction|summarization|writing|overall|[a-z]+ )' "$log" | grep -v '^replay' || true
      echo "load $(cut -d' ' -f1 /proc/loadavg)"
    elif [ "$WHAT" = eagle ]; then
      log="$dir-eagle-$round.log"
      own "$dir" benchmarks.kernels.skinny_linear bench_skinny_linear.py --skip-layers --threads 1 \
        --eagle "$HERE/artifacts/eagle3-smollm2-135m" --prompts "$HERE/../shared/data/prompts_dev.jsonl" \
        "$@" >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
      grep -A4 '^EAGLE drafting' "$log"
      echo "load $(cut -d' ' -f1 /proc/loadavg)"
    else
      own "$dir" benchmarks.kernels.skinny_linear bench_skinny_linear.py --threads 2 --rows 1 2 5 9 17 2>&1 | tail -6
      here "$dir" benchmarks.kernels.verify_attention --prefix 256 --repeats 1 --modes mask 2>&1 | tail -10
    fi
  done
done
