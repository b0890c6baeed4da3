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
  A :class:`SamplingAwareProposer` (``accepts_sampling = True``) also gets ``sampling``: the
  request's own :class:`~specdec.sampling.SamplingParams` (temperature 0 for greedy), so sampled
  drafts can follow the distribution the target is verified against (the output law is exact
  either way).
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


@runtime_checkable
class ScoredProposer(Proposer, Protocol):
    """A proposer that also says how likely each drafted node is to be accepted.

    ``propose_scored`` returns one :class:`ScoredDraft` per request (same budget rules as
    ``propose``). The decoder prefers it: calibrated per-node estimates let its cost model keep
    exactly the nodes that pay for their verify time (:mod:`specdec.control.sizer`).

    A :class:`SizeObserver` is also shown what the decoder kept of each draft.
    """

    def propose_scored(self, req_ids: Sequence[Hashable], budget: int | Sequence[int]) -> list[ScoredDraft]: ...


@runtime_checkable
class SamplingAwareProposer(Proposer, Protocol):
    """A proposer whose ``begin`` takes ``sampling=`` (the request's SamplingParams) when
    ``accepts_sampling`` is True: a draft model sampling at the request's temperature."""

    accepts_sampling: bool


@runtime_checkable
class SizeObserver(Protocol):
    """A proposer the decoder shows, after sizing each request's draft and before the verify, the
    part it will verify (``tree``, parents first) and its verify-cost curve (``cost``, a
    :class:`~specdec.estimate.verify_cost.VerifyCostModel`, read-only). Why: a proposer that decides
    whether a costly part of its draft is worth making (the hybrid's model gate) must know what the
    verify of that part costs, which only the decoder's sizing knows."""

    def observe_sized(self, req_id: Hashable, tree: DraftTree, cost) -> None: ...
