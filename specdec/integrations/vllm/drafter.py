"""The vLLM drafter: ``speculative_config={"method": "custom_class", "model": "<this module>.SuffixDrafter", ...}``.

vLLM 0.32 builds it as ``SuffixDrafter(vllm_config)`` in its model runner and calls, once per
step after the step's bookkeeping, ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu,
slot_mappings=...)`` (vllm/v1/worker/gpu_model_runner.py, ``propose_draft_token_ids``):

* ``sampled_token_ids``: one list per batch row, the tokens committed for that row this step
  (accepted drafts + the bonus/recovered token), empty for a row whose prefill is still partial;
* ``num_tokens_no_spec [max_num_reqs]``: committed tokens per row, the sampled ones included;
* ``token_ids_cpu [max_num_reqs, max_model_len]`` int32: the rows' tokens (prompt, then outputs);
* ``slot_mappings``: KV-cache slots, unused by lookup drafting.

It returns one chain per row (``list[list[int]]``, at most ``num_speculative_tokens`` each; an
empty list means no draft). No request id, sampling parameter or tenant reaches it; identity comes
from the rows (:mod:`specdec.integrations.rows`). Verification is vLLM's chain rejection sampler
with ``draft_probs=None``, exact for deterministic drafts only, which are the only kind returned.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

import numpy as np

from specdec import SuffixProposer
from specdec.integrations.rows import RowSession

from . import cpu_sampling, metrics, version
from .gate import GatedDrafting
from .options import DrafterOptions

logger = logging.getLogger("specdec.vllm")


def engine_facts(vllm_config) -> tuple[int, int]:
    """``(num_speculative_tokens, vocab_size)`` from vLLM's config, refused when missing."""
    spec = getattr(vllm_config, "speculative_config", None)
    k = getattr(spec, "num_speculative_tokens", None)
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"speculative_config.num_speculative_tokens must be an int >= 1, got {k!r}")
    model_config = getattr(vllm_config, "model_config", None)
    if model_config is None:
        raise ValueError("vllm_config has no model_config: cannot read the vocabulary size")
    return k, int(model_config.get_vocab_size())


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
        ValueError / TypeError: bad options or config; a proposer that needs hidden states.
        RuntimeError: vLLM issue 55005 present and ``fix_cpu_expand=False`` (see :mod:`.cpu_sampling`).
    """

    OPTIONS: dict[str, Any] = {}

    def __init__(self, vllm_config):
        self.k, self.vocab_size = engine_facts(vllm_config)
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
        if opts.proposer in ("suffix", "suffix-python"):
            self.proposer = SuffixProposer(self.vocab_size, min_match_len=opts.min_match_len, min_prob=opts.min_prob,
                                           max_depth=depth, use_global=opts.use_global,
                                           global_cache_bytes=opts.global_cache_bytes)
        else:
            self.proposer = _load_factory(opts.proposer)(self.vocab_size)
        if opts.proposer == "suffix":
            self._fast = self.proposer.row_batch(tree_budget=tree_budget, park_steps=opts.park_steps,
                                                 max_parked=opts.max_parked)
        else:
            self._session = RowSession(self.proposer, tree_budget=tree_budget, park_steps=opts.park_steps,
                                       max_parked=opts.max_parked)
        self.gating = GatedDrafting(self.k, off_above=opts.gate_off_above, on_below=opts.gate_on_below,
                                    min_accept_rate=opts.min_accept_rate, log_every=opts.log_every,
                                    cost_gate=opts.cost_gate)
        self.stats = self.gating.stats
        self._unregister = metrics.register(self.stats, f"{type(self).__name__}-{id(self):x}")
        logger.info("specdec drafter ready: proposer=%s, k=%d, vocab=%d, global cache %s, gate off above %s",
                    opts.proposer, self.k, self.vocab_size, "on" if opts.use_global else "off", opts.gate_off_above)

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings=None) -> list[list[int]]:
        """One chain per row (see the module docstring); ``slot_mappings`` is not needed by lookup drafting."""
        del slot_mappings
        entered = time.perf_counter()  # the drafter's own cost, whatever clock the gate runs on
        now = self.gating.clock()
        rows = len(sampled_token_ids)
        sampled = np.fromiter((len(s) for s in sampled_token_ids), dtype=np.int32, count=rows)
        n = num_tokens_no_spec[:rows]
        decision = self.gating.decide(rows, int(n.sum()) / rows if rows else 0.0)  # sum: cheaper than n.mean()
        k = min(self.k, decision.budget) if decision.speculate else 0
        floor = self.gating.floor  # chains stop where a token's estimated acceptance no longer pays
        if self._fast is not None:
            offsets, flat, _ = self._fast.step(token_ids_cpu, num_tokens_no_spec, sampled, k, floor)
            flat, bounds = flat.tolist(), offsets.tolist()
            chains = [flat[bounds[r]:bounds[r + 1]] for r in range(rows)]
        else:
            chains = self._session.step(token_ids_cpu, num_tokens_no_spec, sampled, k, floor).chains
        tracker = self._fast if self._fast is not None else self._session
        ids, kinds, _, begin, end, drafted, accepted = tracker.events()
        self.gating.observe(drafted, accepted, fit=self.gating.cost is not None and self._decode_step(
            ids, kinds, begin, end, sampled), now=now)
        self.gating.stats.propose_seconds += time.perf_counter() - entered
        return chains

    def _decode_step(self, ids, kinds, begin, end, sampled) -> bool:
        """Whether the time since the last call was one decode step of these rows: none is new,
        resumed or in prefill (now or at the last call: a chunked prefill's last chunk), and each
        committed exactly what it sampled (else a drafter call was skipped). Only the cost gate fits it."""
        prefilling, self._prefilling = self._prefilling, set(ids[sampled == 0].tolist())
        return bool((kinds == 0).all() and not self._prefilling and ((end - begin) == sampled).all()
                    and prefilling.isdisjoint(ids.tolist()))

    def load_model(self, target_model) -> None:
        """Called by vLLM's CPU runner for every drafter (vllm/v1/worker/cpu_model_runner.py, unguarded;
        the GPU runner calls it only if present): lookup drafting loads no weights."""
        del target_model

    @property
    def tracked_requests(self) -> int:
        """Requests the drafter keeps (in the batch, or parked until they return or are ended)."""
        return self._fast.tracked if self._fast is not None else self._session.tracked


class GatedSuffixDrafter(SuffixDrafter):
    """SuffixDrafter whose load gate is read from ``SPECDEC_VLLM_OPTIONS`` like any option; kept as a
    separate name so a config line says which policy it runs. Without ``gate_off_above`` it refuses."""

    def __init__(self, vllm_config):
        opts = DrafterOptions.resolve(self.OPTIONS)
        if opts.gate_off_above == float("inf") and not opts.cost_gate:
            raise ValueError("GatedSuffixDrafter needs gate_off_above or cost_gate in SPECDEC_VLLM_OPTIONS "
                             "(e.g. '{\"cost_gate\": true}' or '{\"gate_off_above\": 8}')")
        super().__init__(vllm_config)


class CostGatedSuffixDrafter(SuffixDrafter):
    """SuffixDrafter with the cost gate on (``cost_gate``: each step's budget from this engine's own step
    times, :class:`~specdec.serving.cost_gate.CostGate`), so a ``speculative_config`` that names this
    class is the whole setting: no ``SPECDEC_VLLM_OPTIONS`` needed (it may still add options)."""

    OPTIONS = {"cost_gate": True}
