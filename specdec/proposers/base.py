"""The Proposer protocol: what every drafter (draft model, trained heads, lookup) implements.

A proposer serves many requests, each named by a hashable ``req_id``:

* ``begin(req_id, prompt_ids, *, tenant=None, target_hidden=None)`` opens a request. ``tenant`` is the
  isolation domain for state shared across requests (never draft from another tenant's data unless
  configured to). ``target_hidden`` ``[len(prompt_ids), H]`` comes only when ``requires_target_hidden``;
  a :class:`SamplingAwareProposer` (``accepts_sampling = True``) also gets the request's ``sampling``.
* ``propose(req_ids, budget)``: one :class:`~specdec.DraftTree` per request, at most ``budget`` nodes
  (an int, or one per request), possibly empty. It must leave the committed state as the last
  ``commit`` set it (two proposes without a commit are allowed).
* ``commit(req_id, accepted_ids, *, target_hidden=None)``: the emitted tokens (accepted drafts, then one
  target token); the proposer appends them and rolls back anything speculative that disagrees.
  ``target_hidden[j]`` is the target state whose distribution ``accepted_ids[j]`` was verified against.
* ``end(req_id)`` releases the request. Unknown ids raise ``KeyError``.
* ``memory_bytes()``: device memory held now (weights + caches), which the planner subtracts from KV.
* ``artifact``: what the proposer is bound to (nothing, a tokenizer, or one target checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Protocol, Sequence, runtime_checkable

import torch

from ..artifacts import Artifact
from ..tree import DraftTree


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


@dataclass(frozen=True)
class ScoredDraft:
    """A draft ``tree`` with ``node_probs`` (float ``[n]``: estimated probability node ``i`` is accepted,
    the product along its path), ``expected_accepted`` (their sum, excluding the target's own token)
    and ``source`` (which estimator scored it, e.g. ``"request"``; the decoder calibrates each apart)."""

    tree: DraftTree
    node_probs: torch.Tensor
    expected_accepted: float
    source: str = ""


@runtime_checkable
class ScoredProposer(Proposer, Protocol):
    """A proposer whose ``propose_scored`` returns one :class:`ScoredDraft` per request (``propose``'s
    budget rules), so the sizer keeps exactly the nodes worth their verify time. A :class:`SizeObserver`
    is also shown what the decoder kept of each draft."""

    def propose_scored(self, req_ids: Sequence[Hashable], budget: int | Sequence[int]) -> list[ScoredDraft]: ...


@runtime_checkable
class SamplingAwareProposer(Proposer, Protocol):
    """A proposer whose ``begin`` takes ``sampling=`` (the request's SamplingParams) when
    ``accepts_sampling`` is True: a draft model sampling at the request's temperature."""

    accepts_sampling: bool


@runtime_checkable
class SizeObserver(Protocol):
    """A proposer the decoder shows, after sizing and before the verify, the part of each draft it will
    verify (``tree``, parents first) and the read-only verify-cost curve (``cost``), so a proposer
    that prices a costly part of its draft (the hybrid's model gate) can charge its verify time."""

    def observe_sized(self, req_id: Hashable, tree: DraftTree, cost) -> None: ...
