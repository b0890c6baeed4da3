"""Each engine's documented logits processing, as the exact law of an audit computes it.

Order changes the law (vLLM applies min-p before top-k/top-p, Hugging Face after; llama.cpp the temperature
last), so a :class:`Profile` is an engine's order of named steps (defined in docs/audit.md, "Processing
steps"), computed in float64 from the model's float32 logits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

import torch

from .settings import Sampling


@dataclass(frozen=True)
class Profile:
    """An engine's processing order: ``steps`` as applied; what presence/frequency (``penalty_counts``) and
    repetition (``repetition_counts``) count, ``"output"`` or ``"context"``; ``source``, where it was read."""

    name: str
    steps: tuple[str, ...]
    penalty_counts: str
    repetition_counts: str
    source: str

    def probs(self, logits: torch.Tensor, prompt_counts: torch.Tensor, out_counts: torch.Tensor,
              sampling: Sampling) -> torch.Tensor:
        """``float64 [R, V]`` probabilities of ``logits [R, V]`` given token counts ``prompt_counts [V]`` and
        ``out_counts [R, V]``; greedy skips temperature and truncations and returns the argmax's point mass."""
        x = logits.double().clone()
        for step in self.steps:
            if sampling.greedy and step in _SAMPLING_ONLY:
                continue
            x = _STEPS[step](x, prompt_counts, out_counts, sampling, self)
        if bool(torch.isinf(x).all(-1).any()):
            raise ValueError(f"{self.name} processing of {sampling.describe()} left a row with no token")
        if sampling.greedy:
            return torch.zeros_like(x).scatter_(-1, x.argmax(-1, keepdim=True), 1.0)
        return torch.softmax(x, -1)


def _allowed(x, pc, oc, s: Sampling, prof):
    if s.allowed_tokens is None:
        return x
    keep = torch.zeros(x.shape[-1], dtype=torch.bool)
    keep[list(s.allowed_tokens)] = True
    return x.masked_fill(~keep, -math.inf)


def _bad(x, pc, oc, s: Sampling, prof):
    if s.bad_tokens:
        x[:, list(s.bad_tokens)] = -math.inf
    return x


def _bias(x, pc, oc, s: Sampling, prof):
    for t, b in s.logit_bias:
        x[:, t] += b
    return x


def _repetition(x, pc, oc, s: Sampling, prof):
    if s.repetition_penalty == 1.0:
        return x
    seen = ((pc.unsqueeze(0) > 0) | (oc > 0)) if prof.repetition_counts == "context" else oc > 0
    pen = torch.where(x > 0, x / s.repetition_penalty, x * s.repetition_penalty)
    return torch.where(seen, pen, x)


def _presence_frequency(x, pc, oc, s: Sampling, prof):
    if s.presence_penalty == 0 and s.frequency_penalty == 0:
        return x
    counts = oc.double() + (pc.unsqueeze(0).double() if prof.penalty_counts == "context" else 0)
    return x - s.frequency_penalty * counts - s.presence_penalty * (counts > 0).double()


def _temperature(x, pc, oc, s: Sampling, prof):
    return x / s.temperature


def _top_k(x, pc, oc, s: Sampling, prof):
    if s.top_k is None or s.top_k >= x.shape[-1]:
        return x
    kth = x.topk(s.top_k, dim=-1).values[:, -1:]
    return x.masked_fill(x < kth, -math.inf)


def _top_p(x, pc, oc, s: Sampling, prof):
    if s.top_p >= 1:
        return x
    sorted_x, order = x.sort(dim=-1, descending=False)
    cum = torch.softmax(sorted_x, -1).cumsum(-1)
    drop = cum <= 1 - s.top_p
    drop[:, -1] = False
    return x.scatter(-1, order, sorted_x.masked_fill(drop, -math.inf))


def _min_p(x, pc, oc, s: Sampling, prof):
    if s.min_p <= 0:
        return x
    p = torch.softmax(x, -1)
    return x.masked_fill(p < s.min_p * p.amax(-1, keepdim=True), -math.inf)


_SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p")
"""Steps a greedy request skips: it takes the argmax (first maximal index) of the processed logits."""

_STEPS = {"allowed": _allowed, "bad": _bad, "bias": _bias, "repetition": _repetition,
          "presence_frequency": _presence_frequency, "temperature": _temperature, "top_k": _top_k, "top_p": _top_p,
          "min_p": _min_p}

PROFILES: "MappingProxyType[str, Profile]" = MappingProxyType({
    "vllm": Profile("vllm", ("allowed", "bad", "bias", "repetition", "presence_frequency", "temperature", "min_p",
                             "top_k", "top_p"), "output", "context",
                    "vllm/v1/sample/sampler.py (Sampler docstring and forward/sample), ops/penalties.py, "
                    "v1/sample/logits_processor/builtin.py (min-p after temperature)"),
    "hf": Profile("hf", ("bias", "repetition", "bad", "allowed", "temperature", "top_k", "top_p", "min_p"),
                  "output", "context",
                  "transformers/generation/utils.py::_get_logits_processor (processors, then the warpers "
                  "temperature, top-k, top-p, min-p)"),
    "llamacpp": Profile("llamacpp", ("bias", "allowed", "bad", "repetition", "presence_frequency", "top_k", "top_p",
                                     "min_p", "temperature"), "output", "output",
                        "llama_cpp/llama.py::Llama._init_sampler (logits processors, then penalties over the tokens "
                        "the sampler accepted, which are the sampled ones: Llama.generate never feeds it the "
                        "prompt; top-k, typical, top-p, min-p, temperature last, dist)"),
})
"""Engine name -> its processing order (specdec's decoder uses ``"hf"``)."""


def profile(name: str) -> Profile:
    """The profile called ``name``; ValueError naming the known ones otherwise."""
    if name not in PROFILES:
        raise ValueError(f"unknown processing profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]
