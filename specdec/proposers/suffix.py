"""SuffixProposer: draft trees by lookup in suffix automata of the request and of past responses.

No weights, no training, no tokenizer binding: the proposer survives every checkpoint swap.
Two caches are consulted at every step:

* the **request cache**: one automaton over the request's prompt + committed tokens, extended on
  every ``commit``; its lookup is the longest suffix of the context that occurred earlier in it.
* the **global cache**: per tenant partition, an automaton over the responses (and optionally the
  prompts) of finished requests, one document each (documents are separated, so a match never
  spans two of them), under a hard byte cap. When a partition exceeds its cap it is rebuilt from
  its most recent documents filling half the cap (amortised O(1) per indexed token).

Drafting (C++, ``build_suffix_draft``) expands a tree best-first by estimated acceptance
probability: each child's probability is its continuation count over its parent's continuation
counts, multiplied along the path. By default the cache with the longer current match drafts
alone (``combine="longest"``; ties go to the request cache): pooling the counts of both
(``combine="pool"``) lets the global cache's many occurrences of a short context outvote the
request's longer, more specific match, and on SmolLM2's greedy answers to the 384 dev prompts
it accepted 0.88 draft tokens per step at budget 4 where the longest match accepts 1.23 (1.44
vs 1.70 at budget 16; ``benchmarks/replay_suffix_acceptance.py``). Nodes below ``min_prob`` are not
drafted, caches matching fewer than ``min_match_len`` tokens contribute nothing, and the depth is
capped at ``ceil(depth_factor * match length)``, so short matches draft little or nothing. Every
node is deterministic (a point-mass draft), so exact verification applies at any temperature.

Tenancy: a request only drafts from its tenant's partition unless ``share_across_tenants=True``.
Verification keeps outputs exact either way, but acceptance (and so latency) would otherwise
reveal whether another tenant's responses contain a given text; see docs/proposers/suffix.md.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from typing import Callable, Hashable, Sequence

import numpy as np
import torch

from ..prompts import read_jsonl
from .suffix_automaton import MatchCalibration, SuffixAutomaton, build_suffix_draft
from ..tree import DraftTree
from .base import Artifact, ScoredDraft
from ..checks import as_token_array, normalize_budgets

_MIN_CACHE_BYTES = 64 * 1024
_DOC_BYTES_PER_TOKEN = 4  # documents are kept as int32 arrays for rebuilds
_MAX_BYTES_PER_TOKEN = 256  # generous bound on automaton + document bytes per indexed token


def read_documents(path: str) -> list[list[int]]:
    """Response token lists from a JSONL file, for :meth:`SuffixProposer.warm`.

    Each non-empty line is an object with ``response_ids`` (the self-distillation files of
    ``specdec train``) or ``output_ids`` (``benchmarks/gen_greedy_outputs.py``).

    Raises:
        ValueError: a missing file, a line that is not JSON, or a row without either field.
    """
    return [row_response_ids(row, f"{path}:{n}") for n, row in read_jsonl(path, "responses file")]


def row_response_ids(row, where: str) -> list:
    """The response of one JSONL row: its ``response_ids`` (``specdec train`` caches) or
    ``output_ids`` (``benchmarks/gen_greedy_outputs.py``) list.

    Raises:
        ValueError: naming ``where`` when the row is not an object with either list.
    """
    ids = row.get("response_ids", row.get("output_ids")) if isinstance(row, dict) else None
    if not isinstance(ids, list):
        raise ValueError(f"{where}: expected an object with a 'response_ids' or 'output_ids' list")
    return ids


class _Partition:
    """One tenant's global cache: an automaton over its documents, under a byte cap."""

    def __init__(self, vocab_size: int, cap_bytes: int, next_stamp: Callable[[], int]):
        self.vocab_size = vocab_size
        self.cap_bytes = cap_bytes
        self.sam = SuffixAutomaton(vocab_size)
        self.docs: deque[np.ndarray] = deque()
        self.doc_tokens = 0
        # Identifies the automaton object: unique across all partitions of the proposer and renewed
        # by every rebuild, so a request knows when its match must be redone (also when a dropped
        # partition is recreated). Appending documents keeps it: matches stay valid across extends.
        self._next_stamp = next_stamp
        self.generation = next_stamp()
        self.rebuilds = 0

    def memory_bytes(self) -> int:
        return self.sam.memory_bytes() + _DOC_BYTES_PER_TOKEN * self.doc_tokens

    def add(self, doc: np.ndarray) -> None:
        """Index ``doc`` (int32[m]); rebuild from recent documents if the cap is exceeded."""
        if doc.size == 0:
            return
        limit = self.cap_bytes // (2 * _MAX_BYTES_PER_TOKEN)
        if doc.size > limit:  # only the tail of an oversized document can be kept anyway
            doc = np.ascontiguousarray(doc[-limit:])
        self.sam.add_document(doc)
        self.docs.append(doc)
        self.doc_tokens += doc.size
        if self.memory_bytes() > self.cap_bytes:
            self._rebuild()

    def _rebuild(self) -> None:
        """Keep the most recent documents that fill about half the cap, and re-index them.

        Rebuilding to half the cap means the next rebuild is at least half a cap of insertions
        away, so the rebuild cost is amortised O(1) per indexed token. If the byte estimate was
        optimistic the oldest kept documents are dropped until the cap holds.
        """
        per_token = self.sam.memory_bytes() / max(1, self.sam.num_tokens) + _DOC_BYTES_PER_TOKEN
        budget_tokens = int(self.cap_bytes // 2 / per_token)
        kept: deque[np.ndarray] = deque()
        total = 0
        for doc in reversed(self.docs):
            room = budget_tokens - total - 1
            if room <= 0:
                break
            if doc.size > room:
                if not kept:
                    kept.appendleft(np.ascontiguousarray(doc[-room:]))
                    total += room + 1
                break
            kept.appendleft(doc)
            total += doc.size + 1
        while True:
            self.sam = SuffixAutomaton(self.vocab_size)
            for doc in kept:
                self.sam.add_document(doc)
            self.docs = kept
            self.doc_tokens = sum(d.size for d in kept)
            if self.memory_bytes() <= self.cap_bytes or not kept:
                break
            kept.popleft()
        self.generation = self._next_stamp()
        self.rebuilds += 1


class _Request:
    """Per-request state: the request automaton, the committed tokens, the global-cache match."""

    __slots__ = ("sam", "buf", "n", "prompt_len", "partition", "g_generation", "g_len", "g_state", "last", "drafted_at")

    def __init__(self, vocab_size: int, prompt: np.ndarray, partition: Hashable):
        self.sam = SuffixAutomaton(vocab_size)
        self.sam.extend(prompt)
        self.buf = np.empty(max(16, 2 * prompt.size), dtype=np.int32)
        self.buf[: prompt.size] = prompt
        self.n = prompt.size
        self.prompt_len = prompt.size
        self.partition = partition
        self.g_generation = -1  # partition automaton the global match refers to (-1: none yet)
        self.g_len = 0
        self.g_state = 0
        self.last = None  # (tokens int64, parents int32, cells int32, raws float32) of the last draft
        self.drafted_at = -1  # committed tokens when it was drafted (-1: none pending)

    def append(self, ids: np.ndarray) -> None:
        if self.n + ids.size > self.buf.size:
            grown = np.empty(max(2 * self.buf.size, self.n + ids.size), dtype=np.int32)
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        self.buf[self.n : self.n + ids.size] = ids
        self.n += ids.size

    def memory_bytes(self) -> int:
        return self.sam.memory_bytes() + self.buf.nbytes


class SuffixProposer:
    """Lookup proposer over suffix automata of the request and of past responses (per tenant).

    The drafting defaults were chosen by replaying SmolLM2 greedy outputs on the dev prompts
    (``benchmarks/replay_suffix_acceptance.py``; see docs/proposers/suffix.md).

    Args:
        vocab_size: token ids must lie in ``[0, vocab_size)``.
        min_match_len: a cache whose current match is shorter than this drafts nothing (>= 1).
        min_prob: nodes whose estimated acceptance probability is below this are not drafted.
        max_depth: hard cap on draft depth.
        depth_factor: depth is also capped at ``ceil(depth_factor * match length)``; ``<= 0``
            disables the adaptive cap.
        use_global: consult and fill the global (cross-request) cache.
        freeze_global: consult the global cache but stop filling it from ended requests (``warm``
            still adds): later runs then draft exactly as earlier ones did, which seeded sampling
            needs to be bit-reproducible across runs (the output law is exact either way).
        global_cache_bytes: hard byte cap of each tenant partition of the global cache.
        max_partitions: tenant partitions kept; the least recently used one is dropped beyond it,
            so the global cache holds at most ``global_cache_bytes * max_partitions`` bytes.
        index_prompts: also index prompts (as part of their request's document) in the global cache.
        share_across_tenants: all tenants draft from one shared partition (opt-in; see the module
            docstring for the latency side channel this opens).
        combine: ``"longest"`` (the cache with the longer current match drafts alone; ties go to
            the request cache) or ``"pool"`` (continuation counts of both caches added).
        count_prior: pseudo-count added to every continuation total when the request cache (or
            the pooled caches) drafts: a continuation seen once is estimated at
            ``1 / (1 + count_prior)`` instead of certain.
        global_count_prior: the same when the global cache drafts alone. Both default to 0 (plain
            frequencies): the raw estimates are over-confident (about 4x on SmolLM2's answers),
            0.5 / 8 make them roughly calibrated, yet the decoder's acceptance calibration already
            corrects the scale and the calibrated estimates did not decode faster
            (docs/proposers/suffix.md).
        calibrate: ``"online"`` scales every node's conditional by how nodes of its cell (cache,
            matched context length, evidence, share; ``csrc/suffix/match_calibration.h``) fared,
            learnt from the tokens each step commits; ``"frozen"`` drafts with the table learnt so
            far without updating it; ``"off"`` drafts with the raw frequencies. ``None`` (default):
            ``"frozen"`` under ``freeze_global`` (whose runs must draft alike), else ``"online"``.
            Why: frequencies ignore how long the match they were counted under is, and a single
            continuation after a 16-token match is accepted several times as often as after a
            1-token one (docs/proposers/suffix.md, "Match-length calibration").
        calibration_prior: pseudo-observations behind each cell's ratio (> 0): a cell keeps the
            raw estimate until evidence outweighs it.

    Raises:
        ValueError: for out-of-range arguments.
    """

    requires_target_hidden = False

    def __init__(
        self,
        vocab_size: int,
        *,
        min_match_len: int = 1,
        min_prob: float = 0.05,
        max_depth: int = 32,
        depth_factor: float = 4.0,
        use_global: bool = True,
        freeze_global: bool = False,
        global_cache_bytes: int = 256 << 20,
        max_partitions: int = 64,
        index_prompts: bool = False,
        share_across_tenants: bool = False,
        rematch_window: int = 1024,
        combine: str = "longest",
        count_prior: float = 0.0,
        global_count_prior: float = 0.0,
        calibrate: str | None = None,
        calibration_prior: float = 4.0,
    ):
        if not isinstance(vocab_size, int) or not 1 <= vocab_size < 2**31:
            raise ValueError(f"vocab_size must be an int in [1, 2^31), got {vocab_size!r}")
        if min_match_len < 1:
            raise ValueError(f"min_match_len must be >= 1, got {min_match_len}")
        if not 0.0 <= min_prob <= 1.0:
            raise ValueError(f"min_prob must be in [0, 1], got {min_prob}")
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        if global_cache_bytes < _MIN_CACHE_BYTES:
            raise ValueError(f"global_cache_bytes must be >= {_MIN_CACHE_BYTES}, got {global_cache_bytes}")
        if max_partitions < 1:
            raise ValueError(f"max_partitions must be >= 1, got {max_partitions}")
        if rematch_window < 1:
            raise ValueError(f"rematch_window must be >= 1, got {rematch_window}")
        if combine not in ("longest", "pool"):
            raise ValueError(f"combine must be 'longest' or 'pool', got {combine!r}")
        for name, value in (("count_prior", count_prior), ("global_count_prior", global_count_prior)):
            if not 0.0 <= value < float("inf"):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if calibrate is None:
            calibrate = "frozen" if freeze_global else "online"
        if calibrate not in ("online", "frozen", "off"):
            raise ValueError(f"calibrate must be 'online', 'frozen', 'off' or None, got {calibrate!r}")
        if not 0.0 < calibration_prior < float("inf"):
            raise ValueError(f"calibration_prior must be finite and > 0, got {calibration_prior}")
        self.vocab_size = vocab_size
        self.calibrate = calibrate
        self.calibration = MatchCalibration(float(calibration_prior))
        self.min_match_len = int(min_match_len)
        self.min_prob = float(min_prob)
        self.max_depth = int(max_depth)
        self.depth_factor = float(depth_factor)
        self.use_global = bool(use_global)
        self.freeze_global = bool(freeze_global)
        self.global_cache_bytes = int(global_cache_bytes)
        self.max_partitions = int(max_partitions)
        self.index_prompts = bool(index_prompts)
        self.share_across_tenants = bool(share_across_tenants)
        self.rematch_window = int(rematch_window)
        self.combine = combine
        self.count_prior = float(count_prior)
        self.global_count_prior = float(global_count_prior)
        self._requests: dict[Hashable, _Request] = {}
        self._partitions: OrderedDict[Hashable, _Partition] = OrderedDict()
        self._stamps = itertools.count()
        self.artifact = Artifact(
            name="suffix",
            bound_to="nothing",
            details={"global_cache_bytes": self.global_cache_bytes, "share_across_tenants": self.share_across_tenants,
                     "combine": combine, "count_prior": self.count_prior,
                     "global_count_prior": self.global_count_prior, "calibrate": calibrate},
        )

    # ------------------------------------------------------------------ lifecycle
    def begin(self, req_id: Hashable, prompt_ids, *, tenant: Hashable | None = None, target_hidden=None) -> None:
        """Open ``req_id`` with ``prompt_ids`` (ints, int array or tensor) under ``tenant``."""
        if target_hidden is not None:
            raise ValueError("SuffixProposer does not use target_hidden (requires_target_hidden is False)")
        if req_id in self._requests:
            raise ValueError(f"request {req_id!r} already begun")
        prompt = as_token_array(prompt_ids, self.vocab_size, "prompt_ids")
        key = self._partition_key(tenant)
        self._requests[req_id] = _Request(self.vocab_size, prompt, key)

    def commit(self, req_id: Hashable, accepted_ids, *, target_hidden=None) -> None:
        """Append the emitted tokens (accepted drafts + the target's token) to the request."""
        if target_hidden is not None:
            raise ValueError("SuffixProposer does not use target_hidden (requires_target_hidden is False)")
        req = self._get(req_id)
        ids = as_token_array(accepted_ids, self.vocab_size, "accepted_ids")
        if req.drafted_at == req.n and ids.size:
            self.calibration.observe(*req.last, ids)
            req.drafted_at = -1
        req.sam.extend(ids)
        req.append(ids)
        part = self._partitions.get(req.partition) if self.use_global else None
        if part is not None and req.g_generation == part.generation:
            req.g_len, req.g_state = part.sam.advance(req.g_len, req.g_state, ids)

    def end(self, req_id: Hashable) -> None:
        """Close ``req_id``; its response (and prompt if ``index_prompts``) joins its tenant's cache."""
        req = self._get(req_id)
        del self._requests[req_id]
        if not self.use_global or self.freeze_global:
            return
        start = 0 if self.index_prompts else req.prompt_len
        doc = np.array(req.buf[start : req.n], dtype=np.int32)
        if doc.size:
            self._partition(req.partition, create=True).add(doc)

    def warm(self, documents, *, tenant: Hashable | None = None) -> int:
        """Index past responses into ``tenant``'s global cache, as if requests producing them had ended.

        A serving process that restarts loses its global cache; warming it from responses the
        same target produced earlier (a log, a replay file) restores the steady state instead of
        re-learning it request by request. Each document is one token sequence (ints, int array
        or tensor), kept separate from the others like any ended request. The partition's byte
        cap applies as usual (the most recent documents are kept). Returns the tokens indexed.

        Raises:
            ValueError: ``use_global=False``, or a document with ids outside the vocabulary.
        """
        if not self.use_global:
            raise ValueError("warm() fills the global cache, but this proposer has use_global=False")
        part = self._partition(self._partition_key(tenant), create=True)
        indexed = 0
        for i, doc in enumerate(documents):
            arr = as_token_array(doc, self.vocab_size, f"documents[{i}]")
            if arr.size:
                part.add(arr)
                indexed += int(arr.size)
        return indexed

    # ------------------------------------------------------------------ drafting
    def propose(self, req_ids: Sequence[Hashable], budget: int | Sequence[int]) -> list[DraftTree]:
        """One deterministic :class:`DraftTree` per request with at most ``budget`` nodes (may be empty)."""
        return [d.tree for d in self.propose_scored(req_ids, budget)]

    def propose_scored(self, req_ids: Sequence[Hashable], budget: int | Sequence[int]) -> list[ScoredDraft]:
        """Like :meth:`propose`, with each node's estimated acceptance probability.

        ``ScoredDraft.expected_accepted`` (sum of node probabilities) is the cost model's input
        for choosing the budget: the expected accepted draft tokens per step.
        """
        budgets = normalize_budgets(req_ids, budget)
        out = []
        for req_id, b in zip(req_ids, budgets):
            toks, parents, probs, source = self._draft(self._get(req_id), b)
            tree = DraftTree.trusted(  # valid by construction: parents precede children, ids from the caches
                torch.from_numpy(toks),
                torch.from_numpy(parents),
                torch.ones(toks.size, dtype=torch.bool),
                vocab_size=self.vocab_size,
            )
            out.append(ScoredDraft(tree, torch.from_numpy(probs), sum(probs.tolist()), source))
        return out

    def match_sources(self, req_id: Hashable) -> dict[str, tuple]:
        """The caches the next draft of ``req_id`` reads and its current match in each:
        ``{"request" | "global": (automaton, match length, match state)}`` (only caches matching at
        least ``min_match_len`` tokens). Re-matches the global cache first if it was rebuilt."""
        return self._sources(self._get(req_id))

    def _sources(self, req: _Request) -> dict[str, tuple]:
        sources = {}  # cache name -> (automaton, match length, match state); the request's first
        length, state = req.sam.repeat_match()
        if length >= self.min_match_len:
            sources["request"] = (req.sam, length, state)
        part = self._partitions.get(req.partition) if self.use_global else None
        if part is not None:
            if req.g_generation != part.generation:
                window = req.buf[max(0, req.n - self.rematch_window) : req.n]
                req.g_len, req.g_state = part.sam.longest_match(window)
                req.g_generation = part.generation
            if req.g_len >= self.min_match_len:
                sources["global"] = (part.sam, req.g_len, req.g_state)
        return sources

    def _draft(self, req: _Request, budget: int):
        """(tokens int64[n], parents int32[n], probs float32[n], source) for one request; source
        names the cache(s) drafted from: ``"request"``, ``"global"``, ``"pooled"`` or ``""``."""
        sources = self._sources(req)
        if self.combine == "longest" and len(sources) > 1:
            best = max(sources, key=lambda name: sources[name][1])  # first maximum: the request on ties
            sources = {best: sources[best]}
        source = "pooled" if len(sources) > 1 else next(iter(sources), "")
        prior = self.global_count_prior if source == "global" else self.count_prior
        calibration = None if self.calibrate == "off" else self.calibration
        toks, parents, probs, cells, raws, _ = build_suffix_draft(
            list(sources.values()), budget, self.min_match_len, self.min_prob, self.max_depth, self.depth_factor, prior,
            calibration, source or "request", True,
        )
        if self.calibrate == "online":  # scored against the next commit
            req.last, req.drafted_at = (toks, parents, cells, raws), req.n
        return toks, parents, probs, source

    # ------------------------------------------------------------------ accounting
    def memory_bytes(self) -> int:
        """Host bytes held by all request and global caches (this proposer holds no device memory)."""
        return sum(r.memory_bytes() for r in self._requests.values()) + self.global_memory_bytes()

    def global_memory_bytes(self) -> int:
        """Host bytes held by the global cache (all tenant partitions)."""
        return sum(p.memory_bytes() for p in self._partitions.values())

    def global_stats(self, tenant: Hashable | None = None) -> dict:
        """Size facts for ``tenant``'s partition (zeros if none): ``tokens`` and ``documents`` kept,
        ``bytes`` held (automaton + documents), ``rebuilds``, and the automaton's own
        ``automaton_bytes``, ``states`` and ``indexed_tokens`` (separators included)."""
        part = self._partitions.get(self._partition_key(tenant))
        if part is None:
            return dict.fromkeys(("tokens", "documents", "bytes", "rebuilds", "automaton_bytes", "states",
                                  "indexed_tokens"), 0)
        return {"tokens": part.doc_tokens, "documents": len(part.docs), "bytes": part.memory_bytes(),
                "rebuilds": part.rebuilds, "automaton_bytes": part.sam.memory_bytes(), "states": part.sam.num_states,
                "indexed_tokens": part.sam.num_tokens}

    @property
    def active_requests(self) -> int:
        return len(self._requests)

    def row_batch(self, *, tree_budget: int = 16, tracking=None):
        """A :class:`~specdec.proposers.suffix_rows.SuffixRowBatch`: this proposer's drafting for engines
        that pass batch rows, one C++ call a step (``tracking``: a
        :class:`~specdec.proposers.suffix_rows.RowTracking`, default settings when None)."""
        from .suffix_rows import RowTracking, SuffixRowBatch

        return SuffixRowBatch(self, tree_budget=tree_budget, tracking=tracking or RowTracking())

    def shared_cache(self, tenant: Hashable | None = None):
        """``(automaton, generation)`` of ``tenant``'s global cache, or None (off, or nothing indexed yet).

        ``generation`` changes whenever the automaton object is replaced (a rebuild), so a holder of a
        match into it knows when to match again."""
        if not self.use_global:
            return None
        part = self._partitions.get(self._partition_key(tenant))
        return None if part is None else (part.sam, part.generation)

    def index_document(self, tokens, tenant: Hashable | None = None) -> None:
        """Add one finished document (int token ids) to ``tenant``'s global cache; a no-op when it is off."""
        doc = as_token_array(tokens, self.vocab_size, "document")
        if self.use_global and doc.size:
            self._partition(self._partition_key(tenant), create=True).add(doc)

    # ------------------------------------------------------------------ internals
    def _get(self, req_id: Hashable) -> _Request:
        try:
            return self._requests[req_id]
        except KeyError:
            raise KeyError(f"unknown request {req_id!r}: call begin() first") from None

    def _partition_key(self, tenant: Hashable | None) -> tuple:
        if self.share_across_tenants:
            return ("shared",)
        try:
            hash(tenant)
        except TypeError:
            raise TypeError(f"tenant must be hashable, got {type(tenant).__name__}") from None
        return ("tenant", tenant)

    def _partition(self, key: tuple, create: bool) -> _Partition | None:
        part = self._partitions.get(key)
        if part is None and create:
            part = _Partition(self.vocab_size, self.global_cache_bytes, lambda: next(self._stamps))
            self._partitions[key] = part
            while len(self._partitions) > self.max_partitions:
                self._partitions.popitem(last=False)
        if part is not None:
            self._partitions.move_to_end(key)
        return part
