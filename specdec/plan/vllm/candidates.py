"""The configurations a plan measures, named ``METHOD[:K]``, and the ``speculative_config`` each one is.

Methods (vLLM 0.32's names): ``off``; ``ngram`` (n-grams of 1 to 4); ``suffix`` (ArcticInference,
which the server's environment must have); ``draft_model``, ``eagle``, ``eagle3`` (the user's
artifact); ``mtp`` (the target's own layers); ``custom_class`` (specdec's
:class:`~specdec.integrations.vllm.drafter.CostGatedSuffixDrafter`). ``K`` is
``num_speculative_tokens`` (default 4). A schedule candidate (:mod:`.schedule`) adds
``num_speculative_tokens_per_batch_size`` (:mod:`specdec.control.batch_schedule`), which vLLM
applies to its own methods and specdec's drafter applies itself for ``custom_class``. Every config
is plain JSON that ``--speculative-config`` accepts.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping, Sequence

from ...control.batch_schedule import Schedule, k_at

METHODS = ("off", "ngram", "suffix", "draft_model", "eagle", "eagle3", "mtp", "custom_class")
NEEDS_ARTIFACT = {"draft_model": "--draft-model", "eagle": "--eagle-head", "eagle3": "--eagle3-head"}
SCHEDULABLE = ("ngram", "suffix", "draft_model", "eagle", "eagle3", "mtp", "custom_class")
LOOKUP = ("ngram", "suffix", "custom_class")  # draft from the text itself: no weights, no KV
BOUND = {"off": "nothing", "ngram": "nothing", "suffix": "nothing", "custom_class": "nothing",
         "draft_model": "tokenizer", "eagle": "target", "eagle3": "target", "mtp": "target"}
COST_GATED_DRAFTER = "specdec.integrations.vllm.drafter.CostGatedSuffixDrafter"
DEFAULT_K = 4


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One configuration to measure.

    Attributes:
        name: ``METHOD:K`` (``off``; ``METHOD:sched`` for a schedule).
        method: a :data:`METHODS` entry.
        k: ``num_speculative_tokens`` (the schedule's largest K; 0 for off).
        artifact: the draft model's or head's path (draft_model, eagle, eagle3), else None.
        schedule: ``((start, end, K), ...)`` batch-size ranges (inclusive), or None.
    """

    name: str
    method: str
    k: int = 0
    artifact: str | None = None
    schedule: Schedule | None = None

    @property
    def config(self) -> dict | None:
        """The ``speculative_config`` vLLM gets (None: off)."""
        if self.method == "off":
            return None
        cfg: dict = {"method": self.method, "num_speculative_tokens": self.k}
        if self.method == "ngram":
            cfg.update(prompt_lookup_min=1, prompt_lookup_max=4)
        elif self.method == "custom_class":
            cfg["model"] = COST_GATED_DRAFTER
        elif self.artifact is not None:
            cfg["model"] = self.artifact
        if self.schedule is not None:
            cfg["num_speculative_tokens_per_batch_size"] = [list(e) for e in self.schedule]
        return cfg

    @property
    def bound_to(self) -> str:
        """What the configuration is bound to: ``nothing`` (lookup), the ``tokenizer`` (a draft model)
        or the ``target`` checkpoint (heads, MTP layers)."""
        return BOUND[self.method]

    @property
    def family(self) -> str:
        """The method and artifact: candidates of one family differ only in K or schedule."""
        return self.method if self.artifact is None else f"{self.method}@{self.artifact}"

    def k_at(self, batch: int) -> int:
        """Draft tokens per row at ``batch`` running requests (vLLM's lookup, capped at ``k``)."""
        return self.k if self.schedule is None else k_at(self.schedule, batch, self.k)


def parse_candidates(text: str | Sequence[str], artifacts: Mapping[str, str | None]) -> list[Candidate]:
    """Candidates from ``"off,ngram:2,ngram:4,..."`` (or a list of names), with the user's ``artifacts``
    (``{"draft_model": path, "eagle": path, "eagle3": path}``, None where not given).

    Raises:
        ValueError: an unknown method, a K that is not an integer >= 1, a duplicate, a method whose
            artifact was not given (naming the flag) or a path that does not exist.
    """
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise ValueError("no candidates given")
    out: list[Candidate] = []
    for name in names:
        method, _, k_text = name.partition(":")
        if method not in METHODS:
            raise ValueError(f"candidate {name!r}: unknown method {method!r}; expected one of {list(METHODS)}")
        if method == "off":
            if k_text:
                raise ValueError(f"candidate {name!r}: off takes no K")
            cand = Candidate("off", "off")
        else:
            try:
                k = int(k_text) if k_text else DEFAULT_K
            except ValueError:
                raise ValueError(f"candidate {name!r}: K must be an integer >= 1, got {k_text!r}") from None
            if k < 1:
                raise ValueError(f"candidate {name!r}: K must be >= 1, got {k}")
            artifact = None
            if method in NEEDS_ARTIFACT:
                artifact = artifacts.get(method)
                if not artifact:
                    raise ValueError(f"candidate {name!r} needs the artifact: give {NEEDS_ARTIFACT[method]} PATH")
                if not Path(artifact).exists():
                    raise ValueError(f"candidate {name!r}: {NEEDS_ARTIFACT[method]} {artifact} does not exist")
            cand = Candidate(f"{method}:{k}", method, k, artifact)
        if any(c.name == cand.name for c in out):
            raise ValueError(f"candidate {cand.name!r} is listed twice")
        out.append(cand)
    if out[0].method != "off" and not any(c.method == "off" for c in out):
        out.insert(0, Candidate("off", "off"))  # every decision is relative to off
    return out


def default_candidates(artifacts: Mapping[str, str | None], *, mtp: bool = False) -> list[str]:
    """The default list: off; ngram and suffix at K = 2 and 4; each artifact the user gave at K = 2 and 4;
    MTP at K = 1 and 2 when asked; specdec's cost-gated drafter at K = 4."""
    names = ["off", "ngram:2", "ngram:4", "suffix:2", "suffix:4"]
    for method in NEEDS_ARTIFACT:
        if artifacts.get(method):
            names += [f"{method}:2", f"{method}:4"]
    if mtp:
        names += ["mtp:1", "mtp:2"]
    return names + ["custom_class:4"]
