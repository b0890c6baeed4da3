#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, AddressSanitizer + UndefinedBehaviorSanitizer) of the suffix
# automaton and the batched row path vLLM's drafter uses, checked against brute force
# (tests/fuzz/fuzz_suffix_rows.cpp). Bounded: SECONDS_TO_FUZZ (default 60). Needs clang with libFuzzer
# (Debian: apt-get install clang); installs it when missing and apt-get is available.
# Usage: bash scripts/fuzz_suffix.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_FUZZ=${1:-60}
if ! command -v clang++ > /dev/null; then
  if command -v apt-get > /dev/null; then
    apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang > /dev/null
  else
    echo "fuzz_suffix.sh: clang++ not found and no apt-get to install it" >&2
    exit 1
  fi
fi
OUT=build/fuzz
mkdir -p "$OUT/corpus"
# every suffix source (all plain C++; their pybind11 bindings live in csrc/bindings/), so a new one
# cannot be left out of the link
mapfile -t SOURCES < <(find csrc/suffix -name '*.cpp' | sort)
clang++ -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Icsrc tests/fuzz/fuzz_suffix_rows.cpp "${SOURCES[@]}" -o "$OUT/fuzz_suffix_rows"
# libFuzzer exits non-zero on a crash, a sanitizer report or a failed check.
status=0
"$OUT/fuzz_suffix_rows" -max_total_time="$SECONDS_TO_FUZZ" -max_len=2048 -print_final_stats=1 "$OUT/corpus" \
  > "$OUT/log" 2>&1 || status=$?
grep -E "DONE|stat::number_of_executed_units|ERROR|fuzz check failed|SUMMARY|runtime error" "$OUT/log" | head -40
if [ "$status" -eq 0 ]; then
  echo "fuzz_suffix: ${SECONDS_TO_FUZZ}s without a failure"
else
  echo "fuzz_suffix: FAILED (exit $status); the crashing input is in $PWD (crash-*), the log in $OUT/log" >&2
fi
exit "$status"
