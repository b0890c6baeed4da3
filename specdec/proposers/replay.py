"""ReplayProposer: a reference proposer for tests that drafts the rest of a fixed script."""

from __future__ import annotations

from typing import Hashable, Sequence

import torch

from ..checks import as_token_list, normalize_budgets
from ..tree import DraftTree
from .base import Artifact


class ReplayProposer:
    """Drafts the next ``budget`` tokens of ``scripts[req_id]`` (the expected output after the prompt)
    as a deterministic chain while the output agrees with it, nothing once it diverges."""

    requires_target_hidden = False

    def __init__(self, scripts: dict[Hashable, Sequence[int]], vocab_size: int | None = None):
        self._scripts = {k: as_token_list(v, f"script for request {k!r}") for k, v in scripts.items()}
        self._vocab_size = vocab_size
        self._generated: dict[Hashable, list[int]] = {}
        self.artifact = Artifact(name="replay")

    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None) -> None:
        if req_id in self._generated:
            raise ValueError(f"request {req_id!r} already begun")
        if req_id not in self._scripts:
            raise KeyError(f"ReplayProposer has no script for request {req_id!r}")
        as_token_list(prompt_ids, "prompt_ids", self._vocab_size)
        self._generated[req_id] = []

    def _state(self, req_id) -> list[int]:
        if req_id not in self._generated:
            raise KeyError(f"unknown request {req_id!r}: call begin() first")
        return self._generated[req_id]

    def propose(self, req_ids, budget) -> list[DraftTree]:
        out = []
        for req_id, b in zip(req_ids, normalize_budgets(req_ids, budget)):
            done = self._state(req_id)
            script = self._scripts[req_id]
            if script[: len(done)] != done:
                out.append(DraftTree.empty(vocab_size=self._vocab_size))
                continue
            nxt = script[len(done) : len(done) + b]
            out.append(DraftTree.chain(torch.tensor(nxt, dtype=torch.long), vocab_size=self._vocab_size))
        return out

    def commit(self, req_id, accepted_ids, *, target_hidden=None) -> None:
        self._state(req_id).extend(as_token_list(accepted_ids, "accepted_ids", self._vocab_size))

    def end(self, req_id) -> None:
        self._state(req_id)
        del self._generated[req_id]

    def memory_bytes(self) -> int:
        return 0
