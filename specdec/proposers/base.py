"""The Proposer protocol: what every drafter (draft model, trained heads, lookup) implements.

State contract
--------------
A proposer serves many requests at once, each identified by a hashable ``req_id``.

* ``begin(req_id, prompt_ids, *, tenant=None, target_hidden=None)`` opens a request. The proposer
  may keep per-request state from here until ``end``: the committed token sequence, its own KV
  cache, indices into shared caches. ``tenant`` names the isolation domain for any state shared
  across requests (a proposer must never draft one tenant's request from another tenant's data
  unless explicitly configured to). ``target_hidden`` (``[len(prompt_ids), H]``, only passed when
  ``requires_target_hidden`` is True) holds the target's final hidden state at each prompt position.
* ``propose(req_ids, budget)`` returns one :class:`~specdec.DraftTree` per request, with at most
  ``budget`` nodes (an int for all, or one per request). It may return an empty tree when drafting
  is not worth it. ``propose`` may run speculative computation (a drafter's forward over drafted
  tokens) but the *committed* state it keeps must stay what the last ``commit`` established:
  calling ``propose`` twice without a commit is allowed and must not corrupt anything.
* ``commit(req_id, accepted_ids, *, target_hidden=None)`` tells the proposer which tokens the
  target emitted this step, in order: the accepted draft tokens followed by exactly one token
  sampled by the target (bonus or recovery token). The proposer appends them to its committed
  sequence and **rolls back** everything speculative that disagrees with them (for example it
  truncates a drafter's KV cache to the committed length and re-feeds the tokens it has not
  seen). ``target_hidden`` (``[len(accepted_ids), H]``) holds, in row ``j``, the target hidden state
  that produced the distribution ``accepted_ids[j]`` was verified against.
* ``end(req_id)`` releases all per-request state. Unknown request ids raise ``KeyError``.

Accounting and lifecycle
------------------------
* ``memory_bytes()`` is the device memory the proposer holds now (weights + caches), so serving
  code and the planner can subtract it from what the target may use for KV cache.
* ``artifact`` is an :class:`Artifact` manifest saying what the proposer is bound to: nothing (a
  lookup proposer survives every checkpoint swap), a tokenizer (a draft model), or one target
  checkpoint (trained heads must be refit on every release).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Hashable, Literal, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from ..tree import DraftTree

BoundTo = Literal["nothing", "tokenizer", "target"]


@dataclass(frozen=True)
class Artifact:
    """What a proposer is bound to, and the fingerprint of that binding.

    Attributes:
        name: human-readable proposer name ("suffix", "medusa", "draft:SmolLM2-...").
        bound_to: ``"nothing"``, ``"tokenizer"`` or ``"target"``.
        fingerprint: fingerprint of the tokenizer or target checkpoint it is bound to (None when
            bound to nothing).
        version: the artifact's own version string (weights fingerprint for trained artifacts).
        details: free-form facts (training data, measured acceptance, ...).
    """

    name: str
    bound_to: BoundTo = "nothing"
    fingerprint: str | None = None
    version: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.bound_to not in ("nothing", "tokenizer", "target"):
            raise ValueError(f"Artifact.bound_to must be 'nothing', 'tokenizer' or 'target', got {self.bound_to!r}")
        if self.bound_to != "nothing" and not self.fingerprint:
            raise ValueError(f"Artifact {self.name!r} is bound to a {self.bound_to} but has no fingerprint")


@runtime_checkable
class Proposer(Protocol):
    """Drafts token trees for a batch of requests (see the module docstring for the contract)."""

    artifact: Artifact
    requires_target_hidden: bool

    def begin(self, req_id: Hashable, prompt_ids: Sequence[int], *, tenant: Hashable | None = None,
              target_hidden: torch.Tensor | None = None) -> None: ...

    def propose(self, req_ids: Sequence[Hashable], budget: int | Sequence[int]) -> list[DraftTree]: ...

    def commit(self, req_id: Hashable, accepted_ids: Sequence[int], *,
               target_hidden: torch.Tensor | None = None) -> None: ...

    def end(self, req_id: Hashable) -> None: ...

    def memory_bytes(self) -> int: ...


def normalize_budgets(req_ids: Sequence[Hashable], budget: int | Sequence[int]) -> list[int]:
    """One non-negative node budget per request (``budget`` is an int for all, or a sequence)."""
    if isinstance(budget, torch.Tensor) and budget.dim() == 0:
        budget = budget.item()
    if isinstance(budget, numbers.Integral) and not isinstance(budget, bool):
        budgets = [int(budget)] * len(req_ids)
    else:
        try:
            items = list(budget)
        except TypeError:
            raise TypeError(f"propose budget must be an int or one int per request, got {budget!r}") from None
        budgets = [_one_budget(b) for b in items]
        if len(budgets) != len(req_ids):
            raise ValueError(f"propose got {len(budgets)} budgets for {len(req_ids)} requests")
    for b in budgets:
        if b < 0:
            raise ValueError(f"propose budget must be >= 0, got {b}")
    return budgets


def _one_budget(b) -> int:
    """An integer budget (Python, numpy or 0-d tensor int); floats and bools are refused."""
    if isinstance(b, torch.Tensor) and b.dim() == 0:
        b = b.item()
    if isinstance(b, bool) or not isinstance(b, numbers.Integral):
        raise TypeError(f"propose budgets must be integers, got {b!r}")
    return int(b)


def as_token_list(ids: Sequence[int] | torch.Tensor, what: str, vocab_size: int | None = None) -> list[int]:
    """Token ids as a list of Python ints in ``[0, vocab_size)``, or an error naming ``what``.

    A 1-D integer tensor or a sequence of ints (numpy integers included). Floats and bools are
    refused rather than truncated (``int(2.7)`` would silently draft token 2).

    Raises:
        TypeError: float, complex or bool ids.
        ValueError: a tensor that is not 1-D, a negative id, or an id ``>= vocab_size``.
    """
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"{what} must hold integer token ids, got a {ids.dtype} tensor")
        if ids.dim() != 1:
            raise ValueError(f"{what} must be a 1-D tensor, got shape {tuple(ids.shape)}")
        out = ids.tolist()
    else:
        out = list(ids)
        bad = next((t for t in out if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer))), None)
        if bad is not None:
            raise TypeError(f"{what} must hold integer token ids, got {type(bad).__name__} {bad!r}")
        out = [int(t) for t in out]
    if out and min(out) < 0:
        raise ValueError(f"{what} contains negative token id {min(out)}")
    if vocab_size is not None and out and max(out) >= vocab_size:
        raise ValueError(f"{what} contains token id {max(out)}, outside the vocabulary [0, {vocab_size})")
    return out


@dataclass(frozen=True)
class ScoredDraft:
    """A draft tree with the proposer's acceptance estimate for each node.

    Attributes:
        tree: the :class:`DraftTree` (deterministic nodes: an estimate can only prune those).
        node_probs: ``FloatTensor[n]``, estimated probability that node ``i`` is accepted
            (product of estimated conditional probabilities along its path).
        expected_accepted: ``node_probs.sum()``, the expected number of accepted draft tokens
            (the target always adds one more token per step on top of this).
        source: which of the proposer's estimators scored this draft (e.g. the suffix proposer's
            ``"request"`` or ``"global"`` cache). Estimators err differently, so the decoder
            calibrates each source against its own observed acceptance.
    """

    tree: DraftTree
    node_probs: torch.Tensor
    expected_accepted: float
    source: str = ""


class ReplayProposer:
    """Reference proposer for tests: drafts the next tokens of a fixed script as a chain.

    ``scripts[req_id]`` is the full token sequence the request is expected to produce after its
    prompt. While the committed output agrees with the script, ``propose`` drafts the next
    ``budget`` script tokens (deterministic nodes); once the output diverges it drafts nothing.
    With the target's own greedy output as script, every draft is accepted.
    """

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
