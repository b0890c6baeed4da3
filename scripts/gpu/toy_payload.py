"""The smoke run's payload: the same kinds of files the GPU run carries, at toy sizes, built offline.

* ``toy-target.tar.xz``: a model folder (a 4-layer random llama over a 64-word vocabulary, with a
  word-level tokenizer and a ChatML-like chat template) standing in for the GGUF: the part split
  across calls, joined and unpacked on the machine, as the GGUF travels xz-compressed;
* ``prompt_ids.npz``: chat-templated prompts as token ids (:mod:`specdec.training.prompt_ids`);
* ``specdec_smoke_wheel-0.0.1-py3-none-any.whl``: a one-module wheel, installed with the run's
  offline ``pip install --target`` line as the real wheels are;
* ``specdec_smoke_site-0.0.1.site.tar.xz``: a one-module installed tree with its ``.dist-info``,
  extracted as the trimmed transformers is (``trim_site.py``);
* ``payload.json``: the lock (name, role, bytes, sha256 of each), as ``prepare.sh`` writes it, and
  the per-call limit that splits this payload over two calls.

Usage: python scripts/gpu/toy_payload.py --out DIR
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import lzma
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from carry import sha256  # noqa: E402

CHAT = ("{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<s> assistant {% endif %}")
WHEEL = "specdec_smoke_wheel-0.0.1-py3-none-any.whl"
SITE = "specdec_smoke_site-0.0.1.site.tar.xz"


def toy_target(folder: Path):
    """The tiny target and its tokenizer, saved as a model folder ``load_target`` reads."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from specdec.models import tiny_model

    words = [f"w{i}" for i in range(60)] + ["<s>", "</s>", "user", "assistant"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="</s>")
    fast.chat_template = CHAT
    model = tiny_model(seed=11, layers=4, vocab_size=64, hidden_size=64)
    model.generation_config.eos_token_id = fast.eos_token_id
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return model, fast


def wheel(path: Path) -> None:
    """A minimal valid wheel holding ``specdec_smoke_wheel.py``."""
    files = {"specdec_smoke_wheel.py": b"INSTALLED = True\n",
             "specdec_smoke_wheel-0.0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: specdec-smoke-wheel\n"
                                                             b"Version: 0.0.1\n",
             "specdec_smoke_wheel-0.0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: toy\nRoot-Is-Purelib: "
                                                          b"true\nTag: py3-none-any\n"}
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("specdec_smoke_wheel-0.0.1.dist-info/RECORD,,")
    files["specdec_smoke_wheel-0.0.1.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def site_tree(path: Path) -> None:
    """A minimal installed tree (module + ``.dist-info``), xz-compressed as ``trim_site.py`` writes."""
    files = {"specdec_smoke_site.py": b"EXTRACTED = True\n",
             "specdec_smoke_site-0.0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: specdec-smoke-site\n"
                                                           b"Version: 0.0.1\n"}
    with tarfile.open(path, "w:xz") as tar:
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import torch

    from specdec.prompts import chat_ids
    from specdec.training.prompt_ids import write_prompt_ids

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    _, tok = toy_target(out / "toy-target")
    with tarfile.open(out / "toy-target.tar", "w") as tar:
        tar.add(out / "toy-target", arcname="toy-target")
    with open(out / "toy-target.tar", "rb") as src, lzma.open(out / "toy-target.tar.xz", "wb") as dst:
        dst.write(src.read())
    g = torch.Generator().manual_seed(0)
    prompts = [chat_ids(tok, " ".join(f"w{int(x)}" for x in torch.randint(1, 60, (6,), generator=g)))
               for _ in range(48)]
    write_prompt_ids(out / "prompt_ids.npz", prompts, {"source": "toy", "tokenizer": "toy words"})
    wheel(out / WHEEL)
    site_tree(out / SITE)
    items = []
    for name, role in (("toy-target.tar.xz", "model"), ("prompt_ids.npz", "data"), (WHEEL, "wheel"), (SITE, "site")):
        p = out / name
        items.append({"name": name, "role": role, "bytes": p.stat().st_size, "sha256": sha256(p)})
    unpacked = out / "toy-target.tar"
    items[0]["unpacked"] = {"name": unpacked.name, "bytes": unpacked.stat().st_size, "sha256": sha256(unpacked)}
    total = sum(i["bytes"] for i in items)
    whole = max(i["bytes"] for i in items if i["role"] != "model")
    limit = max(whole, (total + 1) // 2) + 1  # two calls, the model split between them
    (out / "payload.json").write_text(json.dumps({"items": items, "meta": {"kind": "smoke"},
                                                  "smoke_limit_bytes": limit}, indent=1))
    print(out / "payload.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
