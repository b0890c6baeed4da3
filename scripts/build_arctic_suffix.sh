#!/usr/bin/env bash
# Build ArcticInference's suffix-decoding module (the suffix tree behind vLLM's method="suffix") from
# its PyPI sdist, CPU only, into .arctic/site, so benchmarks/vllm/bench_propose.py can time it in the
# same run as specdec. Only its csrc/suffix_decoding CMake target (nanobind) is built: the rest of
# arctic-inference (CUDA ops, vLLM patches) is neither built nor imported.
# Usage: bash scripts/build_arctic_suffix.sh [python]   (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
VERSION=0.3.0
OUT=.arctic
mkdir -p "$OUT/src" "$OUT/deps" "$OUT/site/arctic_inference/suffix_decoding"
if [ ! -f "$OUT/src/arctic_inference-$VERSION.tar.gz" ]; then
  # --no-build-isolation: only the sdist is wanted; isolation would build its build deps from source.
  "$PY" -m pip download -q --no-deps --no-build-isolation --no-binary arctic-inference \
    "arctic-inference==$VERSION" -d "$OUT/src"
fi
tar xzf "$OUT/src/arctic_inference-$VERSION.tar.gz" -C "$OUT/src"
SRC="$OUT/src/arctic_inference-$VERSION"
"$PY" -m pip install -q --target "$OUT/deps" nanobind
PYTHONPATH="$OUT/deps" cmake -S "$SRC/csrc/suffix_decoding" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$(command -v "$PY" || echo "$PY")" > "$OUT/cmake.log"
PYTHONPATH="$OUT/deps" cmake --build "$OUT/build" -j 2 > "$OUT/build.log"
cp "$SRC/arctic_inference/__init__.py" "$OUT/site/arctic_inference/"
cp "$SRC"/arctic_inference/suffix_decoding/*.py "$OUT/site/arctic_inference/suffix_decoding/"
cp "$OUT"/build/_C*.so "$OUT/site/arctic_inference/suffix_decoding/"
PYTHONPATH="$OUT/site" "$PY" -c "from arctic_inference.suffix_decoding import SuffixDecodingCache as C; \
print('arctic suffix decoding built:', C)"
