"""A pure-Python wheel cut down to what the GPU run imports, packed as an installed tree (``.site.tar.xz``).

transformers 5.24's wheel is 13 MiB, 10 of them the ~400 model folders under
``transformers/models/``. The GPU run builds llama models only (SmolLM2 and every tiny test target
the CUDA tests build); ``auto`` names the other architectures as strings and imports one only when
asked for it, but imports a few itself (:data:`KEEP`, read off ``sys.modules`` after loading the
GGUF, decoding and importing the GPU benchmarks with the whole wheel).
``transformers/models/__init__.py`` builds its lazy table from the folders present, so a folder left
out is simply absent: asking for it raises the usual "unrecognized model" error.

The output holds the package and its ``.dist-info`` (so ``importlib.metadata.version`` answers) as a
``--target`` install would lay them out, xz-compressed (Python sources compress about twice as well
as the wheel's per-file deflate). ``run.sh`` extracts it into the state folder's ``site/``.

Only the standard library. Usage:
    python scripts/gpu/trim_site.py WHEEL --out DIR/transformers-5.24.0.site.tar.xz
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
import zipfile
from pathlib import Path

KEEP = "auto,encoder_decoder,gemma,gpt2,llama,qwen2,qwen3_5,t5"


def kept(name: str, package: str, models: set[str]) -> bool:
    """Whether a wheel member stays: everything but ``<package>/models/<m>/`` for ``m`` not in ``models``."""
    parts = name.split("/")
    if len(parts) < 4 or parts[0] != package or parts[1] != "models":
        return True
    return parts[2] in models


def trim(wheel: Path, out: Path, models: set[str]) -> tuple[int, int]:
    """Write the kept members of ``wheel`` into ``out`` (tar.xz); returns (kept, dropped) member counts."""
    package = wheel.name.split("-")[0]
    n_kept = n_dropped = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z, tarfile.open(out, "w:xz", preset=9) as tar:
        present = {n.split("/")[2] for n in z.namelist() if n.startswith(f"{package}/models/") and n.count("/") >= 3}
        missing = sorted(models - present)
        if missing:
            raise ValueError(f"{wheel.name} has no {package}/models/ folder for {missing}")
        for info in z.infolist():
            if info.is_dir():
                continue
            if not kept(info.filename, package, models):
                n_dropped += 1
                continue
            data = z.read(info)
            member = tarfile.TarInfo(info.filename)
            member.size, member.mode, member.mtime = len(data), 0o644, 0
            tar.addfile(member, io.BytesIO(data))
            n_kept += 1
    return n_kept, n_dropped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("--keep-models", default=KEEP, help="folders under <package>/models/ to keep")
    ap.add_argument("--out", type=Path, required=True, help="the .site.tar.xz to write")
    args = ap.parse_args(argv)
    if not args.out.name.endswith(".site.tar.xz"):
        ap.error(f"--out must end in .site.tar.xz (run.sh extracts those), got {args.out.name}")
    try:
        n_kept, n_dropped = trim(args.wheel, args.out, {m for m in args.keep_models.split(",") if m})
    except (ValueError, zipfile.BadZipFile) as exc:
        print(f"trim_site: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {n_kept} files kept, {n_dropped} dropped, {args.out.stat().st_size / (1 << 20):.2f} MiB "
          f"(wheel {args.wheel.stat().st_size / (1 << 20):.2f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
