"""SuffixProposer: draft trees by lookup in suffix automata of the request and of past responses.

No weights and no tokenizer binding. Two caches: the request cache (prompt + committed tokens) and
the global cache (per tenant partition: finished responses, one document each so a match never spans
two, under a byte cap; an over-cap partition is rebuilt from its newest documents filling half the
cap, amortised O(1) per indexed token). Drafting (C++ ``build_suffix_draft``) grows a tree best-first
by estimated acceptance (count over parent count, multiplied along the path). Every node is a point
mass, so verification is exact at any temperature. Requests draft only from their tenant's partition
unless ``share_across_tenants``: acceptance timing would otherwise leak other tenants' text
(docs/proposers/suffix.md).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from typing import Callable, Hashable, Sequence

import numpy as np
import torch

from ..prompts import read_jsonl
from .suffix_automaton import MatchCalibration, SuffixAutomaton, build_suffix_draft
from .suffix_options import SuffixCalibration, SuffixDrafting, SuffixGlobalCache
from ..tree import DraftTree
from .base import Artifact, ScoredDraft
from ..checks import as_token_array, normalize_budgets

_DOC_BYTES_PER_TOKEN = 4  # documents are kept as int32 arrays for rebuilds
_MAX_BYTES_PER_TOKEN = 256  # generous bound on automaton + document bytes per indexed token


def read_documents(path: str) -> list[list[int]]:
    """Response token lists of a JSONL file (one :func:`row_response_ids` per line), for
    :meth:`SuffixProposer.warm`. Raises ValueError for a missing file, bad JSON or a bad row."""
    return [row_response_ids(row, f"{path}:{n}") for n, row in read_jsonl(path, "responses file")]


def row_response_ids(row, where: str) -> list:
    """A row's ``response_ids`` (``specdec train`` caches) or ``output_ids`` (greedy-output files);
    ValueError naming ``where`` if it has neither list."""
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
        """Re-index the newest documents filling about half the cap (amortised O(1) per token);
        drop the oldest kept ones while the cap is still exceeded."""
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

    Args:
        vocab_size: token ids must lie in ``[0, vocab_size)``.
        drafting: how trees are grown (:class:`~specdec.proposers.suffix_options.SuffixDrafting`).
        cache: the global cache (:class:`~specdec.proposers.suffix_options.SuffixGlobalCache`).
        calibration: the match calibration's mode and prior
            (:class:`~specdec.proposers.suffix_options.SuffixCalibration`); kept as :attr:`calibration`
            with its mode resolved. The live table is :attr:`match_calibration`.

    Raises:
        ValueError: a bad ``vocab_size``; TypeError: an option of the wrong class.
    """

    requires_target_hidden = False

    def __init__(self, vocab_size: int, *, drafting: SuffixDrafting = SuffixDrafting(),
                 cache: SuffixGlobalCache = SuffixGlobalCache(), calibration: SuffixCalibration = SuffixCalibration()):
        if not isinstance(vocab_size, int) or not 1 <= vocab_size < 2**31:
            raise ValueError(f"vocab_size must be an int in [1, 2^31), got {vocab_size!r}")
        for name, value, cls in (("drafting", drafting, SuffixDrafting), ("cache", cache, SuffixGlobalCache),
                                 ("calibration", calibration, SuffixCalibration)):
            if not isinstance(value, cls):
                raise TypeError(f"{name} must be a {cls.__name__}, got {type(value).__name__}")
        self.vocab_size = vocab_size
        self.drafting = drafting
        self.cache = cache
        self.calibration = calibration.resolved(cache)
        self.match_calibration = MatchCalibration(self.calibration.prior)
        self._requests: dict[Hashable, _Request] = {}
        self._partitions: OrderedDict[Hashable, _Partition] = OrderedDict()
        self._stamps = itertools.count()
        self.artifact = Artifact(
            name="suffix",
            bound_to="nothing",
            details={"global_cache_bytes": cache.global_cache_bytes, "share_across_tenants": cache.share_across_tenants,
                     "combine": drafting.combine, "count_prior": drafting.count_prior,
                     "global_count_prior": drafting.global_count_prior, "calibrate": self.calibration.mode},
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
            self.match_calibration.observe(*req.last, ids)
            req.drafted_at = -1
        req.sam.extend(ids)
        req.append(ids)
        part = self._partitions.get(req.partition) if self.cache.use_global else None
        if part is not None and req.g_generation == part.generation:
            req.g_len, req.g_state = part.sam.advance(req.g_len, req.g_state, ids)

    def end(self, req_id: Hashable) -> None:
        """Close ``req_id``; its response (and prompt if ``index_prompts``) joins its tenant's cache."""
        req = self._get(req_id)
        del self._requests[req_id]
        self._file_ended(req.buf[: req.n], req.prompt_len, req.partition)

    def warm(self, documents, *, tenant: Hashable | None = None) -> int:
        """Index past responses into ``tenant``'s global cache, as if their requests had ended
        (restores a restarted server's steady state). Each document is one token sequence (ints,
        int array or tensor); the byte cap applies as usual. Returns the tokens indexed.

        Raises:
            ValueError: ``use_global=False``, or a document with ids outside the vocabulary.
        """
        if not self.cache.use_global:
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
        """Like :meth:`propose`, with each node's estimated acceptance probability
        (``expected_accepted``: their sum, the cost model's input)."""
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
        """``{"request" | "global": (automaton, match length, match state)}`` for the caches matching
        at least ``min_match_len`` tokens (re-matches a rebuilt global cache first)."""
        return self._sources(self._get(req_id))

    def _sources(self, req: _Request) -> dict[str, tuple]:
        sources = {}  # cache name -> (automaton, match length, match state); the request's first
        length, state = req.sam.repeat_match()
        if length >= self.drafting.min_match_len:
            sources["request"] = (req.sam, length, state)
        part = self._partitions.get(req.partition) if self.cache.use_global else None
        if part is not None:
            if req.g_generation != part.generation:
                window = req.buf[max(0, req.n - self.drafting.rematch_window) : req.n]
                req.g_len, req.g_state = part.sam.longest_match(window)
                req.g_generation = part.generation
            if req.g_len >= self.drafting.min_match_len:
                sources["global"] = (part.sam, req.g_len, req.g_state)
        return sources

    def _draft(self, req: _Request, budget: int):
        """(tokens int64[n], parents int32[n], probs float32[n], source) for one request; source
        names the cache(s) drafted from: ``"request"``, ``"global"``, ``"pooled"`` or ``""``."""
        rules, mode = self.drafting, self.calibration.mode
        sources = self._sources(req)
        if rules.combine == "longest" and len(sources) > 1:
            best = max(sources, key=lambda name: sources[name][1])  # first maximum: the request on ties
            sources = {best: sources[best]}
        source = "pooled" if len(sources) > 1 else next(iter(sources), "")
        prior = rules.global_count_prior if source == "global" else rules.count_prior
        toks, parents, probs, cells, raws, _ = build_suffix_draft(
            list(sources.values()), budget, rules.min_match_len, rules.min_prob, rules.max_depth, rules.depth_factor,
            prior, None if mode == "off" else self.match_calibration, source or "request", True,
        )
        if mode == "online":  # scored against the next commit
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
        """``tenant``'s partition sizes (zeros if none): ``tokens``, ``documents``, ``bytes``, ``rebuilds``,
        ``automaton_bytes``, ``states``, ``indexed_tokens`` (separators included)."""
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
        """A :class:`~specdec.proposers.suffix_rows.SuffixRowBatch` (one C++ call a step over batch rows;
        ``tracking``: a ``RowTracking``, defaults when None)."""
        from .suffix_rows import RowTracking, SuffixRowBatch

        return SuffixRowBatch(self, tree_budget=tree_budget, tracking=tracking or RowTracking())

    def shared_cache(self, tenant: Hashable | None = None):
        """``(automaton, generation)`` of ``tenant``'s global cache, or None (off, or empty);
        ``generation`` changes when a rebuild replaces the automaton (a held match must be redone)."""
        if not self.cache.use_global:
            return None
        part = self._partitions.get(self._partition_key(tenant))
        return None if part is None else (part.sam, part.generation)

    @property
    def keeps_ended(self) -> bool:
        """Whether ended requests join the global cache (it is on and not frozen)."""
        return self.cache.use_global and not self.cache.freeze_global

    def index_ended(self, tokens, prompt_len: int, tenant: Hashable | None = None) -> None:
        """File an ended request's ``tokens`` (int ids, its ``prompt_len`` prompt tokens first) in
        ``tenant``'s global cache as :meth:`end` does: nothing when the cache is off or frozen, the
        prompt only under ``index_prompts``."""
        if not 0 <= prompt_len <= len(tokens):
            raise ValueError(f"prompt_len must be in [0, {len(tokens)}], got {prompt_len}")
        self._file_ended(as_token_array(tokens, self.vocab_size, "tokens"), prompt_len, self._partition_key(tenant))

    def global_documents(self, tenant: Hashable | None = None) -> list[np.ndarray]:
        """The documents ``tenant``'s global cache holds now, oldest first (read-only int32 views)."""
        part = self._partitions.get(self._partition_key(tenant))
        views = [] if part is None else [d.view() for d in part.docs]
        for v in views:
            v.flags.writeable = False
        return views

    # ------------------------------------------------------------------ internals
    def _get(self, req_id: Hashable) -> _Request:
        try:
            return self._requests[req_id]
        except KeyError:
            raise KeyError(f"unknown request {req_id!r}: call begin() first") from None

    def _file_ended(self, tokens: np.ndarray, prompt_len: int, key: tuple) -> None:
        if not self.keeps_ended:
            return
        doc = np.array(tokens[0 if self.cache.index_prompts else prompt_len :], dtype=np.int32)
        if doc.size:
            self._partition(key, create=True).add(doc)

    def _partition_key(self, tenant: Hashable | None) -> tuple:
        if self.cache.share_across_tenants:
            return ("shared",)
        try:
            hash(tenant)
        except TypeError:
            raise TypeError(f"tenant must be hashable, got {type(tenant).__name__}") from None
        return ("tenant", tenant)

    def _partition(self, key: tuple, create: bool) -> _Partition | None:
        part = self._partitions.get(key)
        if part is None and create:
            part = _Partition(self.vocab_size, self.cache.global_cache_bytes, lambda: next(self._stamps))
            self._partitions[key] = part
            while len(self._partitions) > self.cache.max_partitions:
                self._partitions.popitem(last=False)
        if part is not None:
            self._partitions.move_to_end(key)
        return part
