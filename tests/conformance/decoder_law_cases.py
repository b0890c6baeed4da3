"""Scenarios of the end-to-end decoder law test: one per proposer family, sampling setting and mutant.

``tests/conformance/test_decoder_law.py`` runs them; ``python -m tests.conformance.decoder_law_cases``
prints the tables of docs/exactness.md: every case and mutant with its p-values; ``--old`` runs the mutants against the
old, nearly bigram ``specdec.models.tiny_model`` instead; ``--power`` runs every mutant on every
exact case (the power of each case's own test).

Every case decodes 5 tokens per trial with the context-dependent target of
:func:`specdec.conformance.targets.context_target` (V = 8), in float32 or, for the low-precision
cases, cast to bfloat16 / float16 (the production GPU dtypes: the exact law is then that model's own,
enumerated by the same forward), and tests the joint law of tokens 1-3, 1-4, 1-5 and 3-5
(:data:`specdec.conformance.decoder_law.WINDOWS`).
"""

from __future__ import annotations

import argparse
import copy
import time
import zlib
from dataclasses import dataclass, replace

import torch

from tests.helpers_proposers import RandomTreeProposer, SampledTreeProposer

from specdec import DraftTree
from specdec.artifacts import TokenizerInfo
from specdec.checks import normalize_budgets
from specdec.conformance.decoder_law import WINDOWS, DecoderCase, check_decoder
from specdec.conformance.engine_mutants import EXACT_VARIANTS, TARGET_MUTANTS, MisreportedDraftProbs
from specdec.conformance.suite import FAMILY_ALPHA
from specdec.conformance.targets import context_target, noisy_copy
from specdec.engine.decoder import SpeculativeDecoder
from specdec.estimate.verify_cost import VerifyCostModel
from specdec.proposers.base import Artifact
from specdec.sampling.params import SamplingParams
from specdec.verify.hf import HFTarget

V = 8
RAGGED = ((2, 5, 3), (4, 1, 6, 0, 7), (3, 3, 5, 2, 6, 1, 4, 0))
"""Three prompt lengths in one batch: the prefill is ragged and every later step has holes."""
UNIFORM = ((4, 1, 6, 0, 7),)
"""One prompt: the first verify step has no holes (tree_op runs; the compaction's in-place cases)."""
SETTINGS = {
    "t1": SamplingParams(1.0),
    "t0.7_topk4": SamplingParams(0.7, top_k=4),
    "topp0.8": SamplingParams(1.0, top_p=0.8),
}
TOKENIZER = TokenizerInfo(vocab={f"t{i}": i for i in range(V)}, special={"eos_token": "t1"})


def target_model(old: bool = False):
    """The context-dependent target or (``old=True``) the nearly bigram tiny model of the old
    sampling test (``tests/engine/test_decoder.py``), built without touching the global RNG."""
    if old:
        from specdec.models import tiny_model

        with torch.random.fork_rng(devices=[]):
            return tiny_model("llama", vocab_size=V, hidden_size=16, heads=2, kv_heads=1, seed=3)
    return context_target(V)


class TeacherTreeProposer:
    """Drafts from the target itself so that almost every step accepts a path that is *not* the
    tree's leading chain, the compaction's hardest case, in every trial.

    Tree: node 0 = the target's least likely token (deterministic, almost always rejected), node 1 a
    sample from the processed target law ``p`` (accepted whenever node 0 is rejected: the residual
    ``p`` without node 0's token is at least ``p`` everywhere else), node 2 a sample from ``p``
    after node 1 (its child). Each accepted step moves rows ``S + 2, S + 3`` to ``L + 1, L + 2``.
    """

    requires_target_hidden = False

    def __init__(self, model, sampling: SamplingParams, seed: int = 0):
        self.model, self.sampling = model, sampling
        self.gen = torch.Generator().manual_seed(seed)
        self.committed: dict = {}
        self.artifact = Artifact("teacher-tree")

    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None):
        self.committed[req_id] = list(prompt_ids)

    def commit(self, req_id, accepted_ids, *, target_hidden=None):
        self.committed[req_id].extend(accepted_ids)

    def end(self, req_id):
        del self.committed[req_id]

    def memory_bytes(self):
        return 0

    @torch.no_grad()
    def _laws(self, seqs: list[list[int]]) -> torch.Tensor:
        """``[B, V]`` processed target law after each sequence (right-padded, causal: padding unseen)."""
        lens = torch.tensor([len(s) for s in seqs])
        ids = torch.zeros(len(seqs), int(lens.max()), dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[b, : len(s)] = torch.tensor(s)
        logits = self.model(input_ids=ids).logits[torch.arange(len(seqs)), lens - 1]
        return self.sampling.process(logits.float())

    def propose(self, req_ids, budget):
        if not req_ids:
            return []
        seqs = [self.committed[r] for r in req_ids]
        p0 = self._laws(seqs)
        x1 = torch.multinomial(p0, 1, generator=self.gen).squeeze(1)
        p1 = self._laws([s + [int(t)] for s, t in zip(seqs, x1)])
        x2 = torch.multinomial(p1, 1, generator=self.gen).squeeze(1)
        bad = p0.argmin(1)
        out = []
        for b, n in enumerate(normalize_budgets(req_ids, budget)):
            n = min(n, 3)
            tokens = torch.stack([bad[b], x1[b], x2[b]])[:n]
            rows = torch.stack([torch.nn.functional.one_hot(bad[b], V).float(), p0[b], p1[b]])[:n]
            parents = torch.tensor([-1, -1, 1][:n], dtype=torch.int32)
            out.append(DraftTree(tokens, parents, rows, torch.tensor([True, False, False][:n], dtype=torch.bool)))
        return out


def _medusa(model, sampling):
    from specdec.proposers.heads import MedusaHeads, MedusaProposer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        heads = MedusaHeads(model.config.hidden_size, 3)
        for p in heads.parameters():
            torch.nn.init.normal_(p, std=0.3)
    return MedusaProposer(heads, model.get_output_embeddings().weight, [[0.6, 0.3]] * 3,
                          Artifact("medusa", "target", "law-test"))


def _eagle(model, sampling):
    from specdec.proposers.eagle import EagleProposer
    from specdec.proposers.eagle_layer import EagleConfig, EagleLayer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = EagleLayer(EagleConfig.from_target(model.config))
        with torch.no_grad():
            for name, p in layer.named_parameters():
                if "norm" not in name:
                    p.normal_(0, 0.3)
    return EagleProposer(layer, model.get_input_embeddings().weight, model.get_output_embeddings().weight,
                         Artifact("eagle", "target", "law-test"), top_k=2, max_depth=3)


def _draft_model(model, sampling):
    from specdec.proposers.draft_model import DraftModelProposer

    return DraftModelProposer(noisy_copy(model, std=0.1, seed=1), target_tokenizer=TOKENIZER, draft_tokenizer=TOKENIZER,
                              mode="sample", sampling=sampling, generator=torch.Generator().manual_seed(1))


def _suffix(model, sampling):
    from specdec.proposers.suffix import SuffixProposer

    return SuffixProposer(V)


class TickClock:
    """A fake clock for the hybrid's model gate: every reading is one tick later than the last, so
    the gate's draft/skip decisions follow the decoding (and the case's seed), not the machine's load."""

    def __init__(self, tick: float = 1e-3):
        self.tick, self.now = tick, 0.0

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def _hybrid(model, sampling):
    """Suffix lookup + the random EAGLE layer of ``_eagle``, merged, with the model gate on (a fresh
    :class:`ModelGate` on a :class:`TickClock`): it drafts EAGLE for some requests and steps and skips
    it for others."""
    from specdec.proposers.hybrid import HybridProposer
    from specdec.control.model_gate import ModelGate
    from specdec.proposers.suffix import SuffixProposer

    return HybridProposer(SuffixProposer(V), _eagle(model, sampling), model_gate=ModelGate(clock=TickClock()))


FAMILIES = {
    "suffix": _suffix,
    "suffix_tree_op": _suffix,
    "draft_model": _draft_model,
    "medusa": _medusa,
    "eagle": _eagle,
    "random_tree": lambda model, sampling: RandomTreeProposer(V, seed=1),
    "sampled_tree": lambda model, sampling: SampledTreeProposer(V, seed=1),
    "random_tree_auto": lambda model, sampling: RandomTreeProposer(V, seed=1),
    "teacher_tree": lambda model, sampling: TeacherTreeProposer(model, sampling, seed=1),
    "hybrid": _hybrid,
}
"""Family name -> ``(model, sampling) -> proposer``."""


@dataclass(frozen=True)
class Spec:
    """A decoder case without its model (so tests can be parametrized before the model exists).

    ``target`` names an HFTarget class: ``"exact"``, a key of ``TARGET_MUTANTS`` or of
    ``EXACT_VARIANTS``; ``wrap`` a proposer-side mutant (``"misreported_q"``); ``dtype`` the target
    model's dtype (``"float32"``, or ``"bfloat16"`` / ``"float16"``: a cast copy). ``slow`` cases run
    in the full suite only (``-m "not slow"`` skips them).
    """

    family: str
    setting: str
    prompts: tuple = RAGGED
    trials: int = 1000
    batch: int | None = None
    target: str = "exact"
    wrap: str | None = None
    slow: bool = False
    dtype: str = "float32"

    @property
    def name(self) -> str:
        tags = [t for t in (None if self.dtype == "float32" else self.dtype,
                            None if self.target == "exact" else self.target, self.wrap) if t]
        extra = f"/batch{self.batch}" if self.batch else ""
        return "+".join(tags + [f"{self.family}/{self.setting}{extra}"])


TARGETS = {"exact": HFTarget, **TARGET_MUTANTS, **EXACT_VARIANTS}
WRAPPERS = {"misreported_q": MisreportedDraftProbs}
SLOW_PER_TRIAL = ("draft_model", "eagle")
"""Families that draft one request at a time (~8-9 ms per trial, against ~1 ms): fewer trials."""
LOW_PRECISION = (torch.bfloat16, torch.float16)


def cast(model, dtype: str):
    """``model`` itself for ``"float32"``, else a copy cast to ``dtype`` (bfloat16 or float16)."""
    if dtype == "float32":
        return model
    if getattr(torch, dtype, None) not in LOW_PRECISION:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    return copy.deepcopy(model).to(getattr(torch, dtype))


def case(model, spec: Spec) -> DecoderCase:
    """The :class:`DecoderCase` of ``spec`` over ``model`` (cast to ``spec.dtype``). ``suffix_tree_op``
    verifies with ``attention="tree_op"``; ``random_tree_auto`` and ``hybrid`` let the cost-model
    sizer prune the trees, at every batch size alike (``random_tree_auto``: each node costs a fifth of
    a step, about half the drafted nodes are cut; ``hybrid``: a twenty-fifth, so its calibrated low
    estimates are cut and enough nodes stay for the tree mutants to show; the sizer never prunes
    sampled trees);
    ``draft_model`` drafts chains of 2."""
    sampling = SETTINGS[spec.setting]
    attention = "tree_op" if spec.family == "suffix_tree_op" else "mask"
    budget = {"draft_model": 2, "random_tree_auto": "auto", "hybrid": "auto"}.get(spec.family, 6)
    node_cost = {"random_tree_auto": 2.0, "hybrid": 1.2}.get(spec.family)  # verify cost of 5 nodes, in steps
    target = cast(model, spec.dtype)

    def build():
        proposer = FAMILIES[spec.family](target, sampling)
        if spec.wrap is not None:
            proposer = WRAPPERS[spec.wrap](proposer)
        # the same node cost at any batch size (the curve of the most rows covers every smaller batch)
        cost = [VerifyCostModel([0, 5], [1.0, node_cost], batch=b) for b in (1, 10 ** 6)] if budget == "auto" else None
        return SpeculativeDecoder(TARGETS[spec.target](target, attention=attention), proposer, max_budget=6,
                                  budget=budget, cost_model=cost)

    return DecoderCase(spec.name, build, sampling, spec.prompts, spec.trials, batch=spec.batch)


def _exact_specs() -> list[Spec]:
    """Every family under every setting; each family's first setting (rotating, so each setting
    leads three families) is fast, the other two slow. The teacher case runs one prompt, so its
    compaction moves rows in place; the suffix tree-op cases run one prompt too, kept from when
    tree_op verified only steps without holes (it now verifies every drafting step, ragged or not,
    and its ragged logits are checked in tests/engine/test_architectures.py), so their seeds and p-values
    stay comparable; ``suffix_tree_op/t1/batch1`` decodes one request per call. The low-precision
    cases run the target in bfloat16 and float16: sampled trees on a ragged batch (the sampler's
    residuals over rounded rows), the teacher tree (compaction of low-precision KV rows) and suffix."""
    specs, names = [], list(SETTINGS)
    for i, family in enumerate(FAMILIES):
        prompts = UNIFORM if family in ("suffix_tree_op", "teacher_tree") else RAGGED
        trials = 200 if family in SLOW_PER_TRIAL else 1000 * len(RAGGED) // len(prompts)
        for j in range(len(names)):
            specs.append(Spec(family, names[(i + j) % len(names)], prompts, trials, slow=j > 0))
    specs.append(Spec("suffix_tree_op", "t1", UNIFORM, 300, batch=1, slow=True))
    specs += [Spec("sampled_tree", "t0.7_topk4", RAGGED, 1000, dtype="bfloat16"),
              Spec("teacher_tree", "t1", UNIFORM, 3000, dtype="float16", slow=True),
              Spec("suffix", "topp0.8", RAGGED, 1000, dtype="bfloat16", slow=True)]
    return specs


EXACT_SPECS = _exact_specs()
VARIANT_SPECS = [Spec("teacher_tree", "t1", UNIFORM, 3000, target=name) for name in EXACT_VARIANTS]
"""Compaction rewrites that must keep the law (teacher tree: a non-leading path in every step)."""
MUTANT_SPECS = [Spec("sampled_tree", "t1", RAGGED, 1000, target=name) if name == "positions_cache_length"
                else Spec("teacher_tree", "t1", UNIFORM, 3000, target=name) for name in TARGET_MUTANTS]
MUTANT_SPECS.append(Spec("sampled_tree", "t1", RAGGED, 1000, wrap="misreported_q"))
"""One spec per mutant, on the scenario that exercises its bug: compaction and node-position mutants
on the teacher tree, the ragged-position mutant on a ragged batch, the q mutant on sampled trees."""

PLANNED_TESTS = len(WINDOWS) * (len(EXACT_SPECS) + len(VARIANT_SPECS))
"""Tests run on exact decoders in tests/conformance/test_decoder_law.py, fast and slow (4 per case): the
Bonferroni ``m``. Running a subset (``-m "not slow"``) keeps the same per-test level (conservative)."""
PER_TEST_ALPHA = FAMILY_ALPHA / PLANNED_TESTS


def seed_of(spec: Spec) -> int:
    """A fixed seed per case (from its name), so CI is deterministic."""
    return zlib.crc32(spec.name.encode())


SAMPLED_FAMILIES = ("draft_model", "sampled_tree", "teacher_tree")
"""Families drafting sampled nodes, where a misreported ``q`` can matter."""


def power_specs(spec: Spec) -> list[Spec]:
    """``spec`` with each mutant in turn: the measured power of that exact case's test."""
    out = [replace(spec, target=name) for name in TARGET_MUTANTS]
    if spec.family in SAMPLED_FAMILIES:
        out.append(replace(spec, wrap="misreported_q"))
    return out


def _row(label: str, model, spec: Spec) -> str:
    start = time.process_time()
    results, stats = check_decoder(case(model, spec), seed=seed_of(spec))
    rejected = sum(r.p_value < PER_TEST_ALPHA for r in results)
    ps = " / ".join(f"{r.p_value:.2g}" for r in results)
    return (f"| {label} | {spec.name} | {spec.trials} x {len(spec.prompts)} | {stats.accepted_per_step:.2f} | {ps} | "
            f"{rejected}/{len(results)} | {time.process_time() - start:.1f} |")


def _min_p(model, spec: Spec) -> float:
    return min(r.p_value for r in check_decoder(case(model, spec), seed=seed_of(spec))[0])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", action="store_true", help="mutants against the old tiny_model target")
    parser.add_argument("--power", action="store_true", help="every mutant on every exact case (long)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = target_model(args.old)
    print(f"Family alpha {FAMILY_ALPHA}, m = {PLANNED_TESTS}, per-test alpha {PER_TEST_ALPHA:.2e}.\n")
    if args.power:
        names = list(TARGET_MUTANTS) + ["misreported_q"]
        print("| case | " + " | ".join(names) + " |\n" + "|---" * (len(names) + 1) + "|")
        for spec in EXACT_SPECS:
            ps = {m.target if m.wrap is None else m.wrap: _min_p(model, m) for m in power_specs(spec)}
            print(f"| {spec.name} | " + " | ".join(f"{ps[n]:.2g}" if n in ps else "-" for n in names) + " |",
                  flush=True)
        return
    print("| decoder | case | trials | accepted/step | p (tokens 1-3 / 1-4 / 1-5 / 3-5) | rejected | CPU s |\n"
          "|---|---|---|---|---|---|---|")
    if not args.old:
        for spec in EXACT_SPECS + VARIANT_SPECS:
            print(_row("exact" + (" (slow)" if spec.slow else ""), model, spec), flush=True)
    for spec in MUTANT_SPECS:
        print(_row("mutant", model, spec), flush=True)


if __name__ == "__main__":
    main()
