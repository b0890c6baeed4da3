"""Statistical exactness suite for speculative-decoding samplers (importable by users).

The first ``K = 1, 2, 3`` tokens a sampler emits in a mini decode loop (draft with a
:class:`DraftSpec`, verify, append, repeat) must follow the exact law of sampling the target token by
token, computed by enumeration (:func:`exact_law`). Many trials, run in lockstep as batched calls, are
G-tested against it (sparse cells merged); a sequence of exact probability 0 fails at once.

Use on your own sampler::

    from specdec.conformance import default_cases, run_suite, batch_sampler
    report = run_suite(batch_sampler(my_rejection_sample_batch))
    assert report.passed, report.summary()

Adapters (:func:`padded_sampler`, :func:`batch_sampler`, :func:`single_sampler`) turn the public
signatures into ``sampler(batch: DraftBatch, generator) -> (tokens [B, M] padded with -1,
num_emitted [B])``. α: :data:`FAMILY_ALPHA` and docs/exactness.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from scipy import stats

from .laws import DraftSpec, Model, PrefixTable, ProcessedModel, TableModel, exact_law
from ..tree import DraftTree

FAMILY_ALPHA = 0.01
"""Family-wise false-rejection rate of :func:`run_suite` on an exact sampler (Bonferroni: each of
the ``m`` tests runs at ``FAMILY_ALPHA / m``)."""

MIN_EXPECTED = 5.0
"""Cells with expected count below this are merged (the usual validity rule for chi-square/G tests)."""


@dataclass(frozen=True)
class DraftBatch:
    """One step's drafts for ``B`` trials sharing one tree shape: ``tokens``, ``parents``,
    ``deterministic`` ``[B, N]``, ``sizes [B]``, ``draft_probs [B, N, V]`` (q, or the point mass),
    ``target_probs [B, N + 1, V]`` (row 0 after the prefix, ``i + 1`` after node i)."""

    tokens: torch.Tensor
    parents: torch.Tensor
    sizes: torch.Tensor
    draft_probs: torch.Tensor
    deterministic: torch.Tensor
    target_probs: torch.Tensor

    def trees(self) -> list[DraftTree]:
        """The drafts as :class:`DraftTree` objects (validated, so a malformed batch shows up)."""
        return [
            DraftTree(self.tokens[b], self.parents[b], self.draft_probs[b], self.deterministic[b])
            for b in range(self.tokens.shape[0])
        ]


BatchSamplerFn = Callable[[DraftBatch, torch.Generator], "tuple[torch.Tensor, torch.Tensor]"]


def padded_sampler(fn: Callable, **kwargs) -> BatchSamplerFn:
    """Adapt a function with :func:`specdec.rejection_sample_padded`'s signature."""

    def run(batch: DraftBatch, generator: torch.Generator):
        res = fn(batch.tokens, batch.parents, batch.sizes, batch.target_probs, draft_probs=batch.draft_probs,
                 deterministic=batch.deterministic, generator=generator, **kwargs)
        return res.tokens, res.num_accepted + 1

    return run


def _pad_results(results) -> tuple[torch.Tensor, torch.Tensor]:
    counts = torch.tensor([r.tokens.numel() for r in results], dtype=torch.long)
    tokens = torch.nn.utils.rnn.pad_sequence([r.tokens.long() for r in results], batch_first=True, padding_value=-1)
    return tokens, counts


def batch_sampler(fn: Callable, **kwargs) -> BatchSamplerFn:
    """Adapt ``fn(trees, target_probs_list, *, generator) -> list[AcceptResult]``."""

    def run(batch: DraftBatch, generator: torch.Generator):
        trees = batch.trees()
        targets = [batch.target_probs[b, : t.num_nodes + 1] for b, t in enumerate(trees)]
        return _pad_results(fn(trees, targets, generator=generator, **kwargs))

    return run


def single_sampler(fn: Callable, **kwargs) -> BatchSamplerFn:
    """Adapt ``fn(tree, target_probs, *, generator) -> AcceptResult`` (called once per trial)."""

    def run(batch: DraftBatch, generator: torch.Generator):
        trees = batch.trees()
        return _pad_results([fn(t, batch.target_probs[b, : t.num_nodes + 1], generator=generator, **kwargs)
                             for b, t in enumerate(trees)])

    return run


@dataclass(frozen=True)
class Case:
    """One conformance scenario: a target, a drafter, a vocabulary, a prompt and a sample size."""

    name: str
    target: Model
    draft: DraftSpec
    vocab: int
    trials: int = 20000
    prompt: tuple = (0, 1)


def simulate(sampler: BatchSamplerFn, case: Case, *, length: int = 3, seed: int = 0) -> torch.Tensor:
    """The first ``length`` tokens of ``case.trials`` independent decode loops, long ``[trials, length]``;
    ValueError for malformed sampler output."""
    V, T = case.vocab, case.trials
    gen = torch.Generator().manual_seed(seed)
    tgt = PrefixTable(case.target, case.prompt, V)
    dft = PrefixTable(case.draft.model, case.prompt, V)
    nodes = case.draft.nodes
    N = len(nodes)
    ranks = case.draft.top_rank
    parents_list = [p for p, _ in nodes]
    det_list = [kind == "top" for _, kind in nodes]
    out = torch.full((T, length), -1, dtype=torch.long)
    count = torch.zeros(T, dtype=torch.long)
    code = torch.zeros(T, dtype=torch.long)
    base = V + 1
    longest = length - 1 + max((_depth(parents_list, i) for i in range(N)), default=0)
    if base ** (longest + 1) >= 2 ** 63:
        raise ValueError(f"vocab {V} with prefixes of up to {longest} tokens overflows the int64 prefix codes: "
                         "the suite is for small vocabularies (V <= ~10) and shallow trees")
    for _ in range(length):
        active = (count < length).nonzero().squeeze(1)
        A = active.numel()
        if A == 0:
            break
        root = code[active]
        depth0 = count[active]
        node_code = torch.zeros(A, N, dtype=torch.long)
        tokens = torch.zeros(A, N, dtype=torch.long)
        q_all = torch.zeros(A, N, V)
        for i, (parent, kind) in enumerate(nodes):
            pc = root if parent < 0 else node_code[:, parent]
            depth = depth0 + (0 if parent < 0 else _depth(parents_list, parent))
            q = dft.lookup(pc)
            if kind == "sample":
                x = torch.multinomial(q, 1, generator=gen).squeeze(1)
                q_all[:, i] = q
            else:
                x = torch.sort(q, dim=1, descending=True, stable=True).indices[:, ranks[i]]
                q_all[:, i] = torch.nn.functional.one_hot(x, V).float()
            tokens[:, i] = x
            node_code[:, i] = pc + (x + 1) * base ** depth
        target = tgt.lookup(torch.cat([root.unsqueeze(1), node_code], 1))
        batch = DraftBatch(tokens, torch.tensor(parents_list, dtype=torch.long).expand(A, N),
                           torch.full((A,), N, dtype=torch.long), q_all,
                           torch.tensor(det_list, dtype=torch.bool).expand(A, N), target)
        emitted, n_emit = sampler(batch, gen)
        if bool((n_emit < 1).any()) or bool((n_emit > N + 1).any()):
            raise ValueError(f"sampler must emit between 1 and N + 1 = {N + 1} tokens per draft, got "
                             f"{n_emit.unique().tolist()}")
        for j in range(int(n_emit.max())):
            take = (j < n_emit) & (depth0 + j < length)
            tok = emitted[:, j] if j < emitted.shape[1] else torch.full((A,), -1)
            if bool((take & ((tok < 0) | (tok >= V))).any()):
                raise ValueError(f"sampler emitted a token outside [0, {V})")
            rows = active[take]
            pos = depth0[take] + j
            out[rows, pos] = tok[take]
            code[rows] += (tok[take] + 1) * base**pos
        count[active] = (depth0 + n_emit).clamp(max=length)
    return out


def _depth(parents: list[int], node: int) -> int:
    d = 1
    while parents[node] >= 0:
        node = parents[node]
        d += 1
    return d


@dataclass(frozen=True)
class GTestResult:
    """One G test: ``case``, tested tokens ``first..k`` (1-based; ``first = 1``: the first ``k``
    tokens), statistic, degrees of freedom, p-value."""

    case: str
    k: int
    statistic: float
    dof: int
    p_value: float
    impossible: int = 0
    first: int = 1

    def __str__(self) -> str:
        extra = f", {self.impossible} impossible sequences" if self.impossible else ""
        which = f"k={self.k}" if self.first == 1 else f"tokens {self.first}-{self.k}"
        return f"{self.case} {which}: G={self.statistic:.1f} dof={self.dof} p={self.p_value:.3g}{extra}"


def g_test(
    observed: torch.Tensor, probs: torch.Tensor, *, min_expected: float = MIN_EXPECTED
) -> tuple[float, int, float, int]:
    """G test of ``observed [C]`` against ``probs [C]``: cells expecting ``< min_expected`` are pooled
    (joining the smallest cell if still sparse); any count in a probability-0 cell gives p 0. Returns
    ``(G, dof, p_value, impossible_count)``."""
    observed = observed.double()
    probs = probs.double()
    n = float(observed.sum())
    impossible = int(observed[probs <= 0].sum())
    if impossible:
        return float("inf"), 0, 0.0, impossible
    exp = probs * n
    support = probs > 0
    obs, exp = observed[support], exp[support]
    sparse = exp < min_expected
    if bool(sparse.any()):
        pooled_o, pooled_e = obs[sparse].sum(), exp[sparse].sum()
        obs, exp = obs[~sparse], exp[~sparse]
        if pooled_e < min_expected and obs.numel():
            j = int(exp.argmin())
            obs[j] += pooled_o
            exp[j] += pooled_e
        else:
            obs = torch.cat([obs, pooled_o.view(1)])
            exp = torch.cat([exp, pooled_e.view(1)])
    dof = int(obs.numel()) - 1
    if dof < 1:
        return 0.0, 0, 1.0, 0
    nz = obs > 0
    g = float(2 * (obs[nz] * (obs[nz] / exp[nz]).log()).sum())
    return g, dof, float(stats.chi2.sf(g, dof)), 0


def check_case(
    sampler: BatchSamplerFn, case: Case, *, seed: int = 0, lengths: Sequence[int] = (1, 2, 3)
) -> list[GTestResult]:
    """Simulate ``case`` once and G-test the joint law of the first ``k`` tokens for each ``k``."""
    L = max(lengths)
    seqs = simulate(sampler, case, length=L, seed=seed)
    law = exact_law(case.target, case.prompt, L, case.vocab)
    return prefix_law_tests(case.name, [(seqs, law)], case.vocab, lengths)


def prefix_law_tests(
    name: str, strata: Sequence[tuple[torch.Tensor, torch.Tensor]], vocab: int, lengths: Sequence[int]
) -> list[GTestResult]:
    """G tests of the joint law of the first ``k`` tokens, one per ``k`` in ``lengths`` (see
    :func:`window_law_tests`)."""
    return window_law_tests(name, strata, vocab, [(1, k) for k in lengths])


def window_law_tests(
    name: str, strata: Sequence[tuple[torch.Tensor, torch.Tensor]], vocab: int, windows: Sequence[tuple[int, int]]
) -> list[GTestResult]:
    """One G test per window ``first..last`` (1-based, inclusive). ``strata``: ``(seqs long [T_s, L],
    law float64 [V ** L])`` pairs (law index: base-``V``, first token most significant); independent
    strata add their G statistics and degrees of freedom."""
    results = []
    for first, last in windows:
        g_sum, dof_sum, impossible = 0.0, 0, 0
        for seqs, law in strata:
            L = seqs.shape[1]
            idx = torch.zeros(seqs.shape[0], dtype=torch.long)
            for j in range(first - 1, last):
                idx = idx * vocab + seqs[:, j]
            outside = tuple(j for j in range(L) if not first - 1 <= j < last)
            table = law.view(*([vocab] * L))
            probs = (table.sum(dim=outside) if outside else table).reshape(-1)
            g, dof, _, imp = g_test(torch.bincount(idx, minlength=vocab ** (last - first + 1)), probs)
            g_sum, dof_sum, impossible = g_sum + g, dof_sum + dof, impossible + imp
        if impossible:
            results.append(GTestResult(name, last, float("inf"), 0, 0.0, impossible, first))
        else:
            p = float(stats.chi2.sf(g_sum, dof_sum)) if dof_sum else 1.0
            results.append(GTestResult(name, last, g_sum, dof_sum, p, 0, first))
    return results


@dataclass
class SuiteReport:
    """All test results and the verdict at the Bonferroni per-test level ``alpha``."""

    results: list[GTestResult] = field(default_factory=list)
    alpha: float = FAMILY_ALPHA
    planned_tests: int = 0

    @property
    def per_test_alpha(self) -> float:
        return self.alpha / max(self.planned_tests, 1)

    @property
    def failures(self) -> list[GTestResult]:
        return [r for r in self.results if r.p_value < self.per_test_alpha]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def min_p(self) -> float:
        return min((r.p_value for r in self.results), default=1.0)

    def summary(self) -> str:
        head = (
            f"{'PASS' if self.passed else 'FAIL'}: {len(self.results)}/{self.planned_tests} tests, "
            f"per-test alpha {self.per_test_alpha:.2e} (family {self.alpha})"
        )
        return "\n".join([head] + [("  FAILED " if r in self.failures else "  ") + str(r) for r in self.results])


def run_suite(
    sampler: BatchSamplerFn,
    cases: Sequence[Case] | None = None,
    *,
    alpha: float = FAMILY_ALPHA,
    seed: int = 0,
    stop_at_first_failure: bool = False,
) -> SuiteReport:
    """Run every case (3 tests each) and report at family-wise level ``alpha`` (Bonferroni)."""
    cases = default_cases() if cases is None else list(cases)
    report = SuiteReport(alpha=alpha, planned_tests=3 * len(cases))
    for i, case in enumerate(cases):
        report.results.extend(check_case(sampler, case, seed=seed + 1000 * i))
        if stop_at_first_failure and not report.passed:
            break
    return report


def default_cases(vocab: int = 5, trials: int = 20000) -> list[Case]:
    """The scenarios the issue requires, each a distinct way to get exactness wrong."""
    p = TableModel(vocab, seed=1)
    q = TableModel(vocab, seed=2, scale=1.0)
    logits_p = TableModel(vocab, seed=3, logits=True)
    logits_q = TableModel(vocab, seed=4, logits=True, scale=1.0)

    def tree(model, kinds):
        return DraftSpec(model, tuple(kinds))

    iid = [(-1, "sample"), (-1, "sample"), (-1, "sample"), (0, "sample"), (0, "sample"), (1, "sample")]
    det = [(-1, "top"), (-1, "top"), (-1, "top"), (0, "top"), (0, "top"), (1, "top")]
    mixed = [(-1, "top"), (-1, "sample"), (-1, "sample"), (0, "sample"), (0, "top"), (1, "top"), (3, "sample")]
    cases = [Case(f"chain{n}", p, DraftSpec.chain(q, n), vocab) for n in (1, 2, 3, 4)]
    cases += [
        Case("chain3_deterministic", p, DraftSpec.chain(q, 3, "top"), vocab),
        Case("tree_iid_siblings", p, tree(q, iid), vocab),
        Case("tree_deterministic_siblings", p, tree(q, det), vocab),
        Case("tree_mixed", p, tree(q, mixed), vocab),
        Case("temperature0.6", ProcessedModel(logits_p, 0.6), DraftSpec.chain(ProcessedModel(logits_q, 0.6), 3), vocab),
        Case("top_k2_tree", ProcessedModel(logits_p, 1.0, top_k=2), tree(q, mixed), vocab),
        Case("top_p0.7_chain", ProcessedModel(logits_p, 0.9, top_p=0.7), DraftSpec.chain(q, 3), vocab),
        Case("temperature0_onehot", ProcessedModel(logits_p, 0.0), tree(q, iid), vocab),
        Case("q_equals_p", p, DraftSpec.chain(p, 3), vocab),
        Case("q_equals_p_tree", p, tree(p, mixed), vocab),
        Case("one_hot_p_half", TableModel(vocab, seed=5, one_hot_frac=0.5), tree(q, iid), vocab),
        Case("q_support_p_lacks", TableModel(vocab, seed=6, zero_frac=0.5), tree(q, mixed), vocab),
        Case("p_support_q_lacks", p, tree(TableModel(vocab, seed=7, zero_frac=0.5), iid), vocab),
        Case(
            "wide_iid_siblings",
            p,
            tree(TableModel(vocab, seed=8, scale=3.0), [(-1, "sample")] * 4 + [(0, "sample")]),
            vocab,
        ),
    ]
    return [Case(c.name, c.target, c.draft, c.vocab, trials, c.prompt) for c in cases]
