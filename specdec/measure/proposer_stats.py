"""Measurements a plan is built on: the target, the workload, each proposer's acceptance and memory
(one module, so ``plan`` and ``review`` measure alike). Proposers come from spec strings
(:mod:`specdec.proposers.registry`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Hashable, Sequence

from ..estimate.acceptance import AcceptanceDist, from_histogram
from ..plan.memory import ProposerMemory, kv_bytes_per_token
from ..plan.workload import WorkloadItem, items_from
from ..prompts import encode_first_turn, read_prompt_records
from ..proposers.registry import make_proposer
from .greedy_replay import measure_by_replay


def default_workload_path() -> Path:
    """The dev-prompt sample shipped with the package (Spec-Bench format, 4 prompts per category)."""
    return Path(__file__).resolve().parent.parent / "data" / "prompts_dev_sample.jsonl"


def fingerprints(model, tokenizer) -> dict:
    """Target checkpoint and tokenizer fingerprints (what a release changes)."""
    from ..artifacts import target_fingerprint, tokenizer_fingerprint

    return {"target": target_fingerprint(model), "tokenizer": tokenizer_fingerprint(tokenizer)}


@dataclasses.dataclass
class Workload:
    """Tokenised prompts, the target's greedy outputs and each request's category."""

    prompts: dict[str, list[int]]
    outputs: dict[str, list[int]]
    categories: dict[str, str]

    def items(self) -> list[WorkloadItem]:
        return items_from(self.prompts, self.outputs, self.categories)

    def by_category(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for rid, cat in self.categories.items():
            out.setdefault(cat, []).append(rid)
        return out


def build_workload(
    model,
    tokenizer,
    path: str | Path,
    *,
    categories: Sequence[str] | None,
    per_category: int,
    max_new_tokens: int,
    target_fp: str,
    cache_dir: Path | None = None,
    progress=None,
) -> Workload:
    """Select prompts, tokenise them and get the target's greedy outputs (cached per target fingerprint)."""
    if max_new_tokens < 2:
        raise ValueError(f"max_new_tokens must be >= 2, got {max_new_tokens}")
    records = read_prompt_records(path, categories=categories, per_category=per_category)
    prompts, cats = {}, {}
    for rec in records:
        rid = f"{rec['category']}-{rec.get('question_id', len(prompts))}"
        prompts[rid] = encode_first_turn(tokenizer, rec)
        cats[rid] = rec["category"]
    key = hashlib.sha256(json.dumps([target_fp, max_new_tokens, prompts], sort_keys=True).encode()).hexdigest()[:16]
    cache = None if cache_dir is None else Path(cache_dir) / f"greedy-{key}.json"
    if cache is not None and cache.exists():
        outputs = json.loads(cache.read_text())
    else:
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        outputs = greedy_outputs(model, prompts, max_new_tokens, eos, progress)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(outputs))
    return Workload(prompts, outputs, cats)


def measure_with_decoder(
    model, proposer, prompts: Sequence[Sequence[int]], max_new_tokens: int, budget: int, name: str = ""
) -> AcceptanceDist:
    """Acceptance histogram from the decoder's per-request metrics (any proposer), one request at a
    time (a batched step would charge its whole drafting time to every request)."""
    from ..engine.decoder import SpeculativeDecoder

    dec = SpeculativeDecoder(model, proposer, max_budget=budget, budget=budget)
    hist: list[int] = []
    propose_s = steps = 0
    for prompt in prompts:
        m = dec.generate(list(prompt), max_new_tokens).metrics
        for a, c in enumerate(m.accepted_hist):
            hist += [a] * c
        propose_s += m.propose_s
        steps += m.steps
    if not hist:
        raise ValueError(f"decoder run of {name!r} produced no speculative steps to measure")
    return from_histogram([min(a, budget) for a in hist], budget, name, propose_s / max(1, steps))


@dataclasses.dataclass
class ProposerMeasurement:
    """What a plan needs about one proposer."""

    spec: str
    artifact: dict
    acceptance: dict[str, AcceptanceDist]  # by category, plus "all"
    memory: ProposerMemory

    def to_dict(self) -> dict:
        return {
            "spec": self.spec,
            "artifact": self.artifact,
            "memory": dataclasses.asdict(self.memory),
            "acceptance": {c: d.to_dict() for c, d in self.acceptance.items()},
        }


def artifact_dict(proposer) -> dict:
    a = proposer.artifact
    return {"name": a.name, "bound_to": a.bound_to, "fingerprint": a.fingerprint, "version": a.version}


def measure_proposer(
    spec: str, model, tokenizer, workload: Workload, budget: int, *, allow_mismatch: bool = False,
    acceptance: AcceptanceDist | None = None,
) -> ProposerMeasurement:
    """Acceptance per category (replay when possible, else the decoder) and memory of one proposer;
    ``acceptance``: a histogram measured elsewhere (e.g. vLLM's counters for a chain engine), used for
    every category instead."""
    proposer = make_proposer(spec, model, tokenizer, allow_mismatch=allow_mismatch)
    first = next(iter(workload.prompts.values()))
    hidden = None
    if getattr(proposer, "requires_target_hidden", False):
        from ..training.data import final_hidden_states

        hidden = final_hidden_states(model, list(first))
    memory = measure_proposer_memory(
        make_proposer(spec, model, tokenizer, allow_mismatch=allow_mismatch), first, target_hidden=hidden
    )
    if acceptance is not None:
        if acceptance.max_budget < budget:
            raise ValueError(f"acceptance {acceptance.name!r} was measured with {acceptance.max_budget} draft tokens, "
                             f"fewer than the planned budget {budget}")
        per_cat = {cat: acceptance for cat in [*workload.by_category(), "all"]}
        return ProposerMeasurement(spec, artifact_dict(proposer), per_cat, memory)
    per_cat: dict[str, AcceptanceDist] = {}
    for cat, rids in workload.by_category().items():
        if getattr(proposer, "requires_target_hidden", False):
            max_new = max(len(workload.outputs[r]) for r in rids)
            per_cat[cat] = measure_with_decoder(
                model, proposer, [workload.prompts[r] for r in rids], max_new, budget, f"{spec}/{cat}"
            )
        else:
            per_cat[cat] = measure_by_replay(
                proposer,
                {r: workload.prompts[r] for r in rids},
                {r: workload.outputs[r] for r in rids},
                budget,
                f"{spec}/{cat}",
            )
    per_cat["all"] = AcceptanceDist.merge(list(per_cat.values()), f"{spec}/all")
    return ProposerMeasurement(spec, artifact_dict(proposer), per_cat, memory)


def target_memory(model, dtype: str | None = None) -> dict:
    """Weights bytes and KV bytes per token of the target (KV in the weights' dtype unless given)."""
    dt = dtype or str(next(model.parameters()).dtype)
    return {
        "weights_bytes": model_weight_bytes(model),
        "kv_bytes_per_token": kv_bytes_per_token(model.config, dt),
        "kv_dtype": dt,
    }


def greedy_outputs(model, prompts: dict, max_new_tokens: int, eos_token_id=None, progress=None) -> dict:
    """The target's greedy continuation of each prompt (:func:`specdec.models.clean_generate`), what
    proposers are replayed against."""
    import torch

    from ..models import clean_generate

    out = {}
    device = next(model.parameters()).device
    for i, (rid, ids) in enumerate(prompts.items()):
        x = torch.tensor([ids], device=device)
        y = clean_generate(model, x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens,
                           eos_token_id=eos_token_id, pad_token_id=eos_token_id)
        out[rid] = y[0, x.shape[1]:].tolist()
        if progress:
            progress(i + 1, len(prompts))
    return out


def measure_proposer_memory(
    proposer, prompt_ids: Sequence[int], req_id: Hashable = "__memprobe__", target_hidden=None
) -> ProposerMemory:
    """A proposer's fixed memory (``memory_bytes()`` before ``begin``) and per-token memory (growth
    over one request / prompt length; shared caches kept after ``end`` count as growth).
    ``target_hidden`` ``[len(prompt), H]`` goes to proposers that need it."""
    if len(prompt_ids) == 0:
        raise ValueError("measure_proposer_memory needs a non-empty prompt")
    before = int(proposer.memory_bytes())
    extra = {} if target_hidden is None else {"target_hidden": target_hidden}
    proposer.begin(req_id, list(prompt_ids), **extra)
    try:
        during = int(proposer.memory_bytes())
    finally:
        proposer.end(req_id)
    return ProposerMemory(before, max(0, during - before) / len(prompt_ids))


def model_weight_bytes(model) -> int:
    """Bytes of a torch module's parameters and buffers (what the target's weights take)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    total += sum(b.numel() * b.element_size() for b in model.buffers())
    return int(total)
