"""The target's greedy answers that the replays walk: a recorded JSONL file, or plain decoding cached as JSON.

Also the target's teacher-forced hidden states over prompt + answer, for proposers that read them
(the rows :func:`specdec.measure.greedy_replay.replay_sequence` commits).
"""

from __future__ import annotations

import json
import os

import torch

from specdec import SpeculativeDecoder
from specdec.prompts import read_jsonl
from specdec.proposers.suffix import row_response_ids
from specdec.verify.hf import HFTarget

from .paths import DATA

DEFAULT_DATA = DATA / "greedy_smollm2.jsonl"  # made by benchmarks.datagen.greedy_outputs
VOCAB = 49152  # SmolLM2's vocabulary: the ids in DEFAULT_DATA


def read_rows(path: str) -> list[dict]:
    """JSONL rows with ``prompt_ids``, ``category`` and ``output_ids`` (``response_ids`` renamed)."""
    return [{**row, "output_ids": row_response_ids(row, f"{path}:{n}")} for n, row in read_jsonl(path)]


def greedy_outputs(model, prompts, max_new_tokens: int, stops, cache: str | None) -> dict[str, list[int]]:
    """``{question id: greedy output ids}`` from plain decoding (cached as JSON when ``cache``)."""
    if cache and os.path.isfile(cache):
        with open(cache) as f:
            saved = json.load(f)
        if all(str(p.question_id) in saved for p in prompts):
            return {str(p.question_id): saved[str(p.question_id)] for p in prompts}
    dec = SpeculativeDecoder(model)
    out = {str(p.question_id): dec.generate(p.ids, max_new_tokens, stop_tokens=stops).tokens for p in prompts}
    if cache:
        os.makedirs(os.path.dirname(cache) or ".", exist_ok=True)
        with open(cache, "w") as f:
            json.dump(out, f)
    return out


class Features:
    """Teacher-forced hidden states of prompt + output, per feature kind (final / fused layers), cached."""

    def __init__(self, model):
        self.model, self._targets, self._cache = model, {}, {}

    def get(self, layers, name: str, ids: list[int]) -> torch.Tensor:
        """``[len(ids), H]`` hidden states of ``ids`` (``layers``: the fused layers, None: the final one)."""
        key = (layers, name)
        if key not in self._cache:
            target = self._targets.setdefault(layers, HFTarget(self.model, hidden_layers=layers))
            _, _, hidden = target.prefill([ids])
            self._cache[key] = hidden[0]
        return self._cache[key]
