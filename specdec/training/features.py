"""Teacher-forced feature cache: what the target computes over fixed sequences, kept on disk in fp16.

One target forward per sequence (a ShareGPT conversation in the chat template, or a prompt plus the
target's own greedy response) yields, at every position ``t``:

* ``fused [T, len(layers) * H]``: the hidden states entering the chosen decoder layers (low, middle,
  high; ``hidden_states[i]`` of transformers' ``output_hidden_states``), concatenated: what an
  EAGLE-3 draft layer reads;
* ``final [T, H]``: the final post-norm hidden state (the LM head's input): what Medusa heads read;
* ``topk_ids, topk_p [T, k]``: the target's own next-token distribution at ``t`` (it predicts token
  ``t + 1``), top ``k`` entries: the distillation label.

Why top-k and not the full distribution or a recomputation: a full row is 49,152 floats (98 KB in
fp16 per token, about 300 GB for 3M tokens); recomputing it from ``final`` costs the LM head again
every epoch (``V x H`` = 28M multiply-adds per token, about a fifth of SmolLM2's whole forward).
The top 16 entries take 96 bytes per token and hold most of the mass (``report()`` measures how
much: ``mass_mean``); a draft layer scores a reduced vocabulary anyway.

Layout: ``<cache>/<name>/shard-NNNNN.safetensors`` (each shard a run of whole sequences, with
``offsets [n + 1]`` into its rows and ``assistant [T]``: positions whose *next* token is assistant
text, where losses count) and ``progress.json`` (sequences done, shards, seconds, tokens). Extraction
is resumable: a rerun continues after the last complete shard; a shard is written atomically.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Sequence

import torch

from ..proposers.eagle3_layer import default_feature_layers
from .data import decoder_of


@dataclass(frozen=True)
class FeatureSpec:
    """What one cache holds (part of its name: a different spec is a different cache)."""

    layers: tuple[int, ...]  # indices into output_hidden_states (0 = embeddings, num_layers = final post-norm)
    top_k: int = 16
    max_len: int = 768

    def __post_init__(self):
        if not self.layers or len(set(self.layers)) != len(self.layers) or min(self.layers) < 0:
            raise ValueError(f"layers must be distinct non-negative hidden-state indices, got {self.layers}")
        if self.top_k < 1 or self.max_len < 2:
            raise ValueError(f"need top_k >= 1 and max_len >= 2, got {self.top_k}, {self.max_len}")

    def tag(self) -> str:
        return f"L{'-'.join(map(str, self.layers))}-k{self.top_k}-len{self.max_len}"

    def bytes_per_token(self, hidden_size: int) -> int:
        """Disk (and, once loaded for training, memory) per cached token: fp16 ``fused`` and ``final``,
        int32 ids and fp16 probabilities of the top-k, the int32 token and its bool loss flag."""
        return 2 * (len(self.layers) + 1) * hidden_size + 6 * self.top_k + 4 + 1

    @staticmethod
    def default_layers(num_layers: int) -> tuple[int, ...]:
        """Low, middle and high (:func:`~specdec.proposers.eagle3_layer.default_feature_layers`)."""
        return default_feature_layers(num_layers)


@dataclass
class TeacherSequence:
    """One teacher-forced sequence: token ids and, per token, whether it is assistant/response text."""

    ids: list[int]
    assistant: list[bool]


@torch.inference_mode()
def extract_one(model, ids: Sequence[int], spec: FeatureSpec, device) -> dict[str, torch.Tensor]:
    """The cached tensors of one sequence (fp16 features, top-k of the target's distribution)."""
    num_layers = int(model.config.num_hidden_layers)
    if max(spec.layers) > num_layers:
        raise ValueError(f"layer index {max(spec.layers)} > the target's {num_layers} layers")
    out = decoder_of(model)(input_ids=torch.tensor([list(ids)], device=device), output_hidden_states=True)
    hs = out.hidden_states
    final = out.last_hidden_state[0]
    logits = model.get_output_embeddings()(final).float()
    top = torch.topk(torch.softmax(logits, -1), spec.top_k, dim=-1)
    return {"fused": torch.cat([hs[i][0] for i in spec.layers], -1).half().cpu(),
            "final": final.half().cpu(), "topk_ids": top.indices.int().cpu(), "topk_p": top.values.half().cpu()}


def cache_dir_for(root: str, target_fp: str, source: str, spec: FeatureSpec) -> str:
    return os.path.join(root, f"features-{target_fp}-{source}-{spec.tag()}")


def _read_progress(path: str) -> dict:
    if not os.path.isfile(path):
        return {"sequences": 0, "tokens": 0, "shards": [], "seconds": 0.0}
    with open(path) as f:
        return json.load(f)


def _write_json(path: str, obj: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)


def extract(model, sequences: Sequence[TeacherSequence], out_dir: str, spec: FeatureSpec, *, device="cpu",
            max_tokens: int | None = None, shard_tokens: int = 65536, meta: dict | None = None,
            progress: bool = True, log: Callable[[str], None] | None = None) -> dict:
    """Extract features for ``sequences`` in order into ``out_dir``, resuming where it stopped.

    Stops after ``max_tokens`` tokens in all (None = every sequence). ``meta`` (the source, the
    target fingerprint, the spec) is written to ``meta.json``; a rerun with different meta raises
    rather than mixing two kinds of data in one folder. Returns the progress record.
    """
    os.makedirs(out_dir, exist_ok=True)
    meta = {**(meta or {}), "spec": asdict(spec)}
    meta_path = os.path.join(out_dir, "meta.json")
    if os.path.isfile(meta_path):
        with open(meta_path) as f:
            old = json.load(f)
        if old != json.loads(json.dumps(meta)):
            raise ValueError(f"{out_dir} holds features made with {old}, not {meta}: use another --cache-dir")
    else:
        _write_json(meta_path, meta)
    prog_path = os.path.join(out_dir, "progress.json")
    prog = _read_progress(prog_path)
    start, done_tokens = prog["sequences"], prog["tokens"]
    goal = sum(len(s.ids) for s in sequences) if max_tokens is None else min(
        max_tokens, sum(len(s.ids) for s in sequences))
    _check_disk(out_dir, goal - min(done_tokens, goal), spec.bytes_per_token(int(model.config.hidden_size)))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=goal, initial=min(done_tokens, goal), desc="target features", unit="tok", smoothing=0.05)
    buf: list[dict] = []
    buf_tokens, t0 = 0, time.time()
    i = start
    for i in range(start, len(sequences)):
        if max_tokens is not None and done_tokens + buf_tokens >= max_tokens:
            break
        s = sequences[i]
        row = extract_one(model, s.ids, spec, device)
        row["tokens"] = torch.tensor(s.ids, dtype=torch.int32)
        # Position t's loss predicts token t + 1: it counts where that token is assistant text.
        row["assistant"] = torch.tensor(s.assistant[1:] + [False], dtype=torch.bool)
        buf.append(row)
        buf_tokens += len(s.ids)
        if bar is not None:
            bar.update(len(s.ids))
        if buf_tokens >= shard_tokens:
            prog = _flush(out_dir, prog, buf, buf_tokens, time.time() - t0, prog_path)
            done_tokens, buf, buf_tokens, t0 = prog["tokens"], [], 0, time.time()
            if log:
                log(f"{prog['sequences']} sequences, {prog['tokens']} tokens, {prog['seconds']:.0f} s")
    else:
        i = len(sequences)
    if buf:
        prog = _flush(out_dir, prog, buf, buf_tokens, time.time() - t0, prog_path)
    if bar is not None:
        bar.close()
    prog["budget_reached"] = max_tokens is not None and prog["tokens"] >= max_tokens
    prog["complete"] = prog["sequences"] >= len(sequences) and not prog["budget_reached"]
    _write_json(prog_path, prog)
    return prog


def _check_disk(out_dir: str, tokens: int, per_token: int) -> None:
    """Refuse, before the first forward, an extraction whose shards cannot fit on ``out_dir``'s disk:
    it would run for hours and fail at the shard that does not fit. (For SmolLM2 the whole ShareGPT
    file is ~39 GB at ``max_len`` 512 and ~108 GB with whole conversations.)"""
    need, free = tokens * per_token, shutil.disk_usage(out_dir).free
    if need > free:
        raise ValueError(f"extracting {tokens:,} more tokens takes ~{need / 1e9:.1f} GB ({per_token:,} bytes a "
                         f"token), but {out_dir} has {free / 1e9:.1f} GB free: pass max_tokens (--max-tokens) "
                         f"<= {free // per_token:,}, or another --cache-dir")


def _flush(out_dir: str, prog: dict, rows: list[dict], tokens: int, seconds: float, prog_path: str) -> dict:
    from safetensors.torch import save_file

    name = f"shard-{len(prog['shards']):05d}.safetensors"
    lens = [r["tokens"].numel() for r in rows]
    tensors = {k: torch.cat([r[k] for r in rows]).contiguous() for k in rows[0]}
    tensors["offsets"] = torch.tensor([0] + lens).cumsum(0)
    path = os.path.join(out_dir, name)
    save_file(tensors, path + ".tmp")
    os.replace(path + ".tmp", path)
    prog = {**prog, "sequences": prog["sequences"] + len(rows), "tokens": prog["tokens"] + tokens,
            "shards": prog["shards"] + [name], "seconds": round(prog["seconds"] + seconds, 3)}
    _write_json(prog_path, prog)
    return prog


@dataclass
class FeatureSet:
    """Cached sequences in memory: ``fused [N, F]``, ``final [N, H]`` (fp16), ``tokens [N]``,
    ``assistant [N]`` (loss positions), ``topk_ids / topk_p [N, k]``, ``offsets [n + 1]``."""

    fused: torch.Tensor
    final: torch.Tensor
    tokens: torch.Tensor
    assistant: torch.Tensor
    topk_ids: torch.Tensor
    topk_p: torch.Tensor
    offsets: torch.Tensor

    @property
    def num_sequences(self) -> int:
        return self.offsets.numel() - 1

    def span(self, i: int) -> tuple[int, int]:
        return int(self.offsets[i]), int(self.offsets[i + 1])

    def report(self) -> dict:
        """Sizes and how much probability the kept top-k holds (the distillation label's coverage)."""
        return {"sequences": self.num_sequences, "tokens": int(self.tokens.numel()),
                "assistant_tokens": int(self.assistant.sum()),
                "top_k": int(self.topk_p.shape[1]), "mass_mean": round(float(self.topk_p.float().sum(-1).mean()), 4),
                "bytes_per_token": sum(t.element_size() * (t[0].numel() if t.dim() > 1 else 1) for t in
                                       (self.fused, self.final, self.tokens, self.assistant, self.topk_ids,
                                        self.topk_p))}


def iter_shards(out_dir: str) -> Iterator[dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    prog = _read_progress(os.path.join(out_dir, "progress.json"))
    for name in prog["shards"]:
        yield load_file(os.path.join(out_dir, name))


def load_features(out_dir: str, max_tokens: int | None = None) -> FeatureSet:
    """Every complete shard (whole sequences, in extraction order) up to ``max_tokens`` tokens.

    Raises:
        ValueError: no complete shard in ``out_dir`` (extraction has not written one yet).
    """
    parts: dict[str, list[torch.Tensor]] = {}
    offsets, total = [torch.zeros(1, dtype=torch.long)], 0
    for shard in iter_shards(out_dir):
        off = shard["offsets"].long()
        n = off.numel() - 1
        if max_tokens is not None:
            n = int((off[1:] + total <= max_tokens).sum())
            if n == 0:
                break
        end = int(off[n])
        for k, v in shard.items():
            if k != "offsets":
                parts.setdefault(k, []).append(v[:end])
        offsets.append(off[1: n + 1] + total)
        total += end
        if max_tokens is not None and n < off.numel() - 1:
            break
    if not parts:
        raise ValueError(f"{out_dir} has no complete feature shard yet (see its progress.json)")
    cat = {k: torch.cat(v) for k, v in parts.items()}
    return FeatureSet(cat["fused"], cat["final"], cat["tokens"].long(), cat["assistant"], cat["topk_ids"].long(),
                      cat["topk_p"], torch.cat(offsets))


def read_meta(out_dir: str) -> dict:
    """The ``meta.json`` of a feature cache (source, target fingerprint, spec)."""
    path = os.path.join(out_dir, "meta.json")
    if not os.path.isfile(path):
        raise ValueError(f"{out_dir} is not a feature cache (no meta.json): run `specdec train features` first")
    with open(path) as f:
        return json.load(f)


def load_many(dirs: Sequence[str], target_fp: str, max_tokens: int | None = None) -> tuple[FeatureSet, list[dict]]:
    """Several caches of one target and one spec, concatenated in the order given (``max_tokens``
    applies to each); ``(data, per-cache facts)``. Refuses caches of another target or spec before
    reading any shard."""
    metas = [read_meta(d) for d in dirs]
    for d, m in zip(dirs, metas):
        if m.get("target") != target_fp:
            raise ValueError(f"{d} holds features of target {m.get('target')}, not of {target_fp}")
        if m["spec"] != metas[0]["spec"]:
            raise ValueError(f"{d} was extracted with {m['spec']}, {dirs[0]} with {metas[0]['spec']}: they cannot mix")
    sets = [load_features(d, max_tokens) for d in dirs]
    facts = []
    for d, m, s in zip(dirs, metas, sets):
        prog = _read_progress(os.path.join(d, "progress.json"))
        share = s.tokens.numel() / max(prog["tokens"], 1)  # the cache may hold more than max_tokens
        facts.append({"dir": os.path.basename(os.path.normpath(d)), "source": m.get("source"), **s.report(),
                      "extract_seconds": round(prog["seconds"] * share, 3),
                      "extract_tokens_per_second": round(prog["tokens"] / prog["seconds"], 1)
                      if prog["seconds"] else None})
    if len(sets) == 1:
        return sets[0], facts
    cat = {k: torch.cat([getattr(s, k) for s in sets]) for k in ("fused", "final", "tokens", "assistant",
                                                                 "topk_ids", "topk_p")}
    offsets, base = [torch.zeros(1, dtype=torch.long)], 0
    for s in sets:
        offsets.append(s.offsets[1:] + base)
        base += int(s.offsets[-1])
    return FeatureSet(**cat, offsets=torch.cat(offsets)), facts
