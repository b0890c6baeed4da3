"""Greedy outputs of the target on a prompt subset (cached) and exact greedy replay through any proposer.

Under greedy verification the target emits its greedy continuation whatever the draft, so a step
accepts the longest tree path matching it plus one bonus token: replaying the recorded output
through ``propose``/``commit`` gives exactly the decoder's tokens per step at a fixed budget,
without the target's verify forwards. Proposers that read target hidden states get them from one
teacher-forced forward over prompt + output (fused layers for EAGLE-3), the rows the decoder
would pass. Shared by ``trained_proposers.py`` and ``learning_curve.py``.
"""

from __future__ import annotations

import json
import os
import time

import torch

from specdec import SpeculativeDecoder
from specdec.measure.greedy_replay import greedy_accepted
from specdec.verify.hf import HFTarget


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
        key = (layers, name)
        if key not in self._cache:
            target = self._targets.setdefault(layers, HFTarget(self.model, hidden_layers=layers))
            _, _, hidden = target.prefill([ids])
            self._cache[key] = hidden[0]
        return self._cache[key]


def replay(proposer, ids: list[int], prompt_len: int, budget: int, hidden: torch.Tensor | None):
    """``(emitted, steps, propose seconds, accepted-length histogram)`` of one greedy replay."""
    P, hist = prompt_len, [0] * (budget + 1)
    need = getattr(proposer, "requires_target_hidden", False)
    h = (lambda a, b: hidden[a:b]) if need else (lambda a, b: None)
    proposer.begin("replay", ids[:P], target_hidden=h(0, P))
    try:
        proposer.commit("replay", [ids[P]], target_hidden=h(P - 1, P))
        c, emitted, steps, spent = P, 0, 0, 0.0
        while c + 1 < len(ids):
            t0 = time.perf_counter()
            tree = proposer.propose(["replay"], budget)[0]
            spent += time.perf_counter() - t0
            a = min(greedy_accepted(tree, ids[c + 1:]), len(ids) - c - 2)
            out = ids[c + 1: c + 2 + a]
            proposer.commit("replay", out, target_hidden=h(c, c + len(out)))
            hist[a] += 1
            c += len(out)
            emitted += len(out)
            steps += 1
    finally:
        proposer.end("replay")
    return emitted, steps, spent, hist


def save_json(path: str | None, obj: dict) -> None:
    """Write ``obj`` to ``path`` (indented) when a path is given."""
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)


def depth_acceptance(hist: list[int]) -> list[float]:
    """``P(accepted >= d)`` for ``d = 1..`` from an accepted-length histogram (acceptance by depth)."""
    steps = sum(hist)
    out, left = [], steps
    for d in range(1, len(hist)):
        left -= hist[d - 1]
        if left <= 0:
            break
        out.append(round(left / steps, 4))
    return out
