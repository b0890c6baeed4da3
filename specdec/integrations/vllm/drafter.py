"""The vLLM drafter: ``speculative_config={"method": "custom_class", "model": "<this module>.SuffixDrafter", ...}``.

vLLM 0.32 builds ``SuffixDrafter(vllm_config)`` and calls ``propose(sampled_token_ids,
num_tokens_no_spec, token_ids_cpu, slot_mappings=...)`` once per step after bookkeeping:
``sampled_token_ids`` one list per row (the tokens committed this step, empty for a partial
prefill), ``num_tokens_no_spec [max_num_reqs]`` committed tokens per row, ``token_ids_cpu
[max_num_reqs, max_model_len]`` int32 the rows' tokens. It returns one deterministic chain per row
(at most ``num_speculative_tokens``, and at most the K that
``num_speculative_tokens_per_batch_size`` gives the running batch, which vLLM does not apply to
``custom_class``; empty: no draft), which vLLM's rejection sampler verifies exactly with
``draft_probs=None``. Request identity comes from the rows
(:mod:`specdec.integrations.rows`). A refused row gets no draft and is counted, never stopping the
engine. docs/vllm.md lists the vLLM facts relied on and why prompt embeddings are refused.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

import numpy as np

from ...control.batch_schedule import Schedule, validate_schedule
from ...proposers.suffix import SuffixProposer
from ...proposers.suffix_options import SuffixDrafting, SuffixGlobalCache
from ..rows import CONTINUED, REFUSED, RowSession
from ...proposers.suffix_rows import RowTracking

from . import LOGGER_NAME, cpu_sampling, version
from . import prometheus as metrics
from .gate import GatedDrafting
from .options import DrafterOptions

logger = logging.getLogger(LOGGER_NAME)


def engine_facts(vllm_config) -> tuple[int, int, int]:
    """``(num_speculative_tokens, vocab_size, max_model_len)`` from vLLM's config, refused when missing."""
    spec = getattr(vllm_config, "speculative_config", None)
    k = getattr(spec, "num_speculative_tokens", None)
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"speculative_config.num_speculative_tokens must be an int >= 1, got {k!r}")
    model_config = getattr(vllm_config, "model_config", None)
    if model_config is None:
        raise ValueError("vllm_config has no model_config: cannot read the vocabulary size")
    max_len = getattr(model_config, "max_model_len", None)
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"model_config.max_model_len must be an int >= 1, got {max_len!r}")
    return k, int(model_config.get_vocab_size()), max_len


def engine_schedule(vllm_config, k: int) -> Schedule | None:
    """The config's ``num_speculative_tokens_per_batch_size`` (None when absent), refused by name when
    vLLM's own checks or a K above ``k`` (which vLLM would cap silently) reject it."""
    table = getattr(getattr(vllm_config, "speculative_config", None), "num_speculative_tokens_per_batch_size", None)
    if table is None:
        return None
    try:
        return validate_schedule(table, k)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"speculative_config.num_speculative_tokens_per_batch_size: {exc}") from None


PROMPT_EMBEDS_REFUSED = (
    "specdec's vLLM drafter does not run with enable_prompt_embeds: vLLM leaves an embeddings-only "
    "request's row in token_ids_cpu holding the previous request's tokens, so the drafter would draft "
    "(and vary latency) from another user's text; serve prompt embeddings without speculation, or "
    "speculation without prompt embeddings"
)


def refuse_prompt_embeds(vllm_config) -> None:
    """Raise ``ValueError`` (:data:`PROMPT_EMBEDS_REFUSED`) when the engine accepts prompt embeddings."""
    if getattr(getattr(vllm_config, "model_config", None), "enable_prompt_embeds", False):
        raise ValueError(PROMPT_EMBEDS_REFUSED)


def _load_factory(path: str):
    module, _, name = path.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"drafter option 'proposer' = {path!r}: cannot load {name!r} from {module!r}: {exc}") from None
    if not callable(fn):
        raise ValueError(f"drafter option 'proposer' = {path!r} is not callable")
    return fn


class SuffixDrafter:
    """specdec's suffix proposer (and any deterministic specdec Proposer) as a vLLM drafter.

    Options: :class:`DrafterOptions` (a subclass's ``OPTIONS`` dict, then ``SPECDEC_VLLM_OPTIONS``).

    Raises:
        ValueError / TypeError: bad options or config; a proposer that needs hidden states; an
            engine that accepts prompt embeddings (:data:`PROMPT_EMBEDS_REFUSED`).
        RuntimeError: vLLM issue 55005 present and ``fix_cpu_expand=False`` (see :mod:`.cpu_sampling`).
    """

    OPTIONS: dict[str, Any] = {}

    def __init__(self, vllm_config):
        self.k, self.vocab_size, self.max_model_len = engine_facts(vllm_config)
        schedule = engine_schedule(vllm_config, self.k)
        refuse_prompt_embeds(vllm_config)
        self.options = opts = DrafterOptions.resolve(self.OPTIONS)
        found = version.installed()
        if found is not None and (warning := version.check(found[1])):
            logger.warning(warning)
        if opts.fix_cpu_expand:
            self.cpu_expand_fixed = cpu_sampling.install()
        elif (why := cpu_sampling.refusal()) is not None:
            raise RuntimeError(why)
        else:
            self.cpu_expand_fixed = False
        depth = self.k if opts.max_depth is None else opts.max_depth
        tree_budget = self.k if opts.tree_budget is None else opts.tree_budget
        self._fast = None
        self._session = None
        self._prefilling: set[int] = set()  # rows' request ids still in prefill at the last call
        self._offered: set[int] = set()  # request ids that could draft at the last call (a chain or not)
        self._longest = 0  # the longest row at the last call (whether vLLM may skip the next call)
        tracking = RowTracking(park_steps=opts.park_steps, max_parked=opts.max_parked,
                               max_parked_tokens=opts.max_parked_tokens, park_seconds=opts.park_seconds)
        if opts.proposer in ("suffix", "suffix-python"):
            self.proposer = SuffixProposer(
                self.vocab_size,
                drafting=SuffixDrafting(min_match_len=opts.min_match_len, min_prob=opts.min_prob, max_depth=depth),
                cache=SuffixGlobalCache(use_global=opts.use_global, global_cache_bytes=opts.global_cache_bytes))
        else:
            self.proposer = _load_factory(opts.proposer)(self.vocab_size)
        if opts.proposer == "suffix":
            self._fast = self.proposer.row_batch(tree_budget=tree_budget, tracking=tracking)
        else:
            self._session = RowSession(self.proposer, tree_budget=tree_budget, tracking=tracking)
        self.gating = GatedDrafting(self.k, off_above=opts.gate_off_above, on_below=opts.gate_on_below,
                                    min_accept_rate=opts.min_accept_rate, log_every=opts.log_every,
                                    cost_gate=opts.cost_gate, schedule=schedule)
        self.stats = self.gating.stats
        self._unregister = metrics.register(self.stats, f"{type(self).__name__}-{id(self):x}")
        logger.info("specdec drafter ready: proposer=%s, k=%d, vocab=%d, global cache %s, gate off above %s, "
                    "schedule %s", opts.proposer, self.k, self.vocab_size, "on" if opts.use_global else "off",
                    opts.gate_off_above, "none" if schedule is None else [list(e) for e in schedule])

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings=None) -> list[list[int]]:
        """One chain per row (see the module docstring)."""
        del slot_mappings
        entered = time.perf_counter()  # the drafter's own cost, whatever clock the gate runs on
        now = self.gating.clock()
        rows = len(sampled_token_ids)
        sampled = np.fromiter((len(s) for s in sampled_token_ids), dtype=np.int32, count=rows)
        n = num_tokens_no_spec[:rows]
        decision = self.gating.decide(rows, int(n.sum()) / rows if rows else 0.0)  # sum: cheaper than n.mean()
        k = min(self.k, decision.budget) if decision.speculate else 0
        floor = self.gating.floor  # chains stop where a token's estimated acceptance no longer pays
        unseen = self._unseen_bound()
        self._longest = int(n.max()) if rows else 0
        if self._fast is not None:
            offsets, flat, _ = self._fast.step(token_ids_cpu, num_tokens_no_spec, sampled, k, floor, max_unseen=unseen,
                                               now=now, strict=False)
            flat, bounds = flat.tolist(), offsets.tolist()
            chains = [flat[bounds[r]:bounds[r + 1]] for r in range(rows)]
        else:
            chains = self._session.step(token_ids_cpu, num_tokens_no_spec, sampled, k, floor, max_unseen=unseen,
                                        now=now, strict=False).chains
        tracker = self._fast if self._fast is not None else self._session
        ids, kinds, _, begin, end, drafted, accepted = tracker.events()
        if (refused := int((kinds == REFUSED).sum())):
            self._refused(refused, tracker.refusal)
        offered = self._was_offered(ids, kinds, sampled, k)
        fit, prefill = self._step_shape(ids, kinds, begin, end, sampled)
        self.gating.observe(drafted, accepted, fit=fit, now=now, offered=offered, prefill=prefill)
        self.gating.stats.propose_seconds += time.perf_counter() - entered
        return chains

    def _unseen_bound(self) -> int:
        """Tokens a row may have committed since the last call beyond this call's samples: ``k + 1``
        (one skipped call) while the longest row at the last call was within ``2k + 1`` of max_model_len
        (the only time vLLM skips the drafter), else 0, so a row that gained more is a new request."""
        return self.k + 1 if self._longest + 2 * self.k + 1 > self.max_model_len else 0

    def _refused(self, rows: int, why: str) -> None:
        """Count refused rows; log the reason on the first one and then every ``log_every`` refusals."""
        s = self.gating.stats
        if s.rows_refused == 0 or (self.options.log_every and s.rows_refused // self.options.log_every
                                   != (s.rows_refused + rows) // self.options.log_every):
            logger.warning("specdec drafter: %d row(s) refused this step, no draft for them: %s", rows, why)
        s.rows_refused += rows

    def _was_offered(self, ids, kinds, sampled, k) -> np.ndarray:
        """``[rows]`` bool: the row's request could draft at the last call (sampled, budget > 0) and was
        verified now; only such rows say anything about acceptance."""
        offered = self._offered
        self._offered = set(ids[(sampled > 0) & (kinds != REFUSED)].tolist()) if k > 0 else set()
        return np.fromiter((kinds[r] == CONTINUED and int(ids[r]) in offered for r in range(len(ids))), dtype=bool,
                           count=len(ids))

    def _step_shape(self, ids, kinds, begin, end, sampled) -> tuple[bool, int]:
        """``(fit, prefill)`` of the step since the last call, for the cost gate: ``prefill`` rows carried
        prefill work (new, resumed, prefilling now or at the last call); ``fit`` when no row was refused
        and every continued row committed exactly what it sampled (else a call was skipped)."""
        prefilling, self._prefilling = self._prefilling, set(ids[sampled == 0].tolist())
        continued = kinds == CONTINUED
        was_prefilling = np.fromiter((int(i) in prefilling for i in ids), dtype=bool, count=len(ids))
        prefill = int((~continued | (sampled == 0) | was_prefilling).sum())
        fit = bool((kinds != REFUSED).all() and ((end - begin) == sampled)[continued & ~was_prefilling].all())
        return fit, prefill

    def load_model(self, target_model) -> None:
        """Called by vLLM's CPU runner for every drafter; lookup drafting loads no weights."""
        del target_model

    @property
    def tracked_requests(self) -> int:
        """Requests the drafter keeps (in the batch, or parked until they return or are ended)."""
        return self._fast.tracked if self._fast is not None else self._session.tracked


class GatedSuffixDrafter(SuffixDrafter):
    """SuffixDrafter whose load gate comes from ``SPECDEC_VLLM_OPTIONS``, named so a config line says which
    policy it runs. Without ``gate_off_above`` or ``cost_gate`` it refuses to start."""

    def __init__(self, vllm_config):
        opts = DrafterOptions.resolve(self.OPTIONS)
        if opts.gate_off_above == float("inf") and not opts.cost_gate:
            raise ValueError("GatedSuffixDrafter needs gate_off_above or cost_gate in SPECDEC_VLLM_OPTIONS "
                             "(e.g. '{\"cost_gate\": true}' or '{\"gate_off_above\": 8}')")
        super().__init__(vllm_config)


class CostGatedSuffixDrafter(SuffixDrafter):
    """SuffixDrafter with the cost gate on (:class:`~specdec.control.cost_gate.CostGate`): naming this class
    is the whole setting; ``SPECDEC_VLLM_OPTIONS`` may still add options."""

    OPTIONS = {"cost_gate": True}
