"""A vLLM-loadable copy of a checkpoint whose tied embedding was saved under ``lm_head.weight`` only.

vLLM's Llama loader skips ``lm_head.weight`` when ``tie_word_embeddings`` is set and expects
``model.embed_tokens.weight``, so it serves such a folder (specdec's pre-0.2 GGUF conversions,
``safetensors.torch.save_model``) with an all-zero embedding. :func:`vllm_ready` writes, once, a
sibling ``<name>-vllm`` with the embedding under both names (stamped with the source's size and
mtime). docs/design-notes.md ("Loading and generating with Hugging Face models") has the story.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

EMBED = "model.embed_tokens.weight"
HEAD = "lm_head.weight"


def vllm_ready(folder: str | Path) -> Path:
    """``folder`` itself when vLLM can load it, else the fixed copy (made if missing or stale).

    Raises:
        FileNotFoundError: no ``model.safetensors`` / ``config.json`` in ``folder``.
        ValueError: neither embedding key is present.
    """
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    folder = Path(folder)
    weights, config = folder / "model.safetensors", folder / "config.json"
    for need in (weights, config):
        if not need.exists():
            raise FileNotFoundError(f"{need} not found: not a single-file safetensors checkpoint")
    with safe_open(str(weights), "pt") as f:
        keys = set(f.keys())
    tied = bool(json.loads(config.read_text()).get("tie_word_embeddings", False))
    if EMBED in keys or not tied:
        return folder
    if HEAD not in keys:
        raise ValueError(f"{weights} has neither {EMBED!r} nor {HEAD!r}")
    out = folder.parent / f"{folder.name}-vllm"
    stat = weights.stat()
    stamp = f"{weights} {stat.st_size} {stat.st_mtime_ns}"
    if (out / "source.txt").exists() and (out / "source.txt").read_text() == stamp:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for item in folder.iterdir():
        if item.is_file() and item.name not in ("model.safetensors", "source.txt"):
            shutil.copy2(item, out / item.name)
    tensors = load_file(str(weights))
    tensors[EMBED] = tensors[HEAD].clone()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "source.txt").write_text(stamp)
    return out
