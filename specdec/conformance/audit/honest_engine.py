"""A reference speculative engine, honest by construction, and the base of the audit's mutant engines.

vLLM V1's speculation in plain torch (batched mixed settings in vLLM's order, an n-gram drafter, chain
verification), reading logits from the teacher-forced :class:`~specdec.conformance.audit.law.LogitTable` s:
it tests the logic around the logits, not forwards or caches. Design: docs/audit.md, "The reference engine".
Mutants override :meth:`ReferenceEngine.row_sampling` and :meth:`ReferenceEngine.accept_probability`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from .engine import Job, Refused, Samples, request_seed
from .law import LogitTables
from .processing import PROFILES
from .settings import Sampling


@dataclass
class _Seq:
    prompt: tuple[int, ...]
    sampling: Sampling
    slot: tuple[int, int]  # (prompt index in the job, completion index)
    gen: torch.Generator | None
    out: list[int] = field(default_factory=list)
    done: bool = False


class ReferenceEngine:
    """Honest speculative engine over ``model``: at most ``length`` tokens per request, ``k`` drafts per step;
    ``tables``: LogitTables to share with an audit (None: its own)."""

    name = "reference"
    method = "ngram"
    profile = "vllm"

    def __init__(self, model, length: int = 5, *, k: int = 3, tables: LogitTables | None = None):
        if tables is not None and (tables.model is not model or tables.length != length):
            raise ValueError("tables must be LogitTables of this model at this length")
        self.model, self.length, self.k = model, length, k
        self.vocab = int(model.get_output_embeddings().weight.shape[0])
        self.tables = tables if tables is not None else LogitTables(model, length)
        self._profile = PROFILES[self.profile]

    def describe(self) -> dict:
        return {"engine": self.name, "method": self.method, "profile": self.profile, "k": self.k,
                "class": type(self).__name__}

    # ------------------------------------------------------------------ hooks
    def row_sampling(self, batch: Sequence[Sampling], b: int, row: int, drafts: int) -> Sampling:
        """The settings of row ``row`` (``drafts``: the bonus row) of request ``b`` in a step verifying ``drafts``."""
        return batch[b]

    def accept_probability(self, p_draft: torch.Tensor) -> torch.Tensor:
        """Probability of accepting a point-mass draft whose token has target probability ``p_draft``."""
        return p_draft

    # ------------------------------------------------------------------ engine
    def run(self, jobs: Sequence[Job], speculative: bool) -> list:
        return [self._run_job(job, speculative) for job in jobs]

    def _run_job(self, job: Job, speculative: bool):
        if any(s.max_tokens > self.length for s in job.sampling):
            return Refused(f"the reference engine generates at most {self.length} tokens", by="adapter")
        shared = torch.Generator().manual_seed(job.seed)
        seqs, requests = [], 0
        for i, (prompt, s) in enumerate(zip(job.prompts, job.sampling)):
            for r in range(job.n // s.n):
                seed = request_seed(job.seed, requests, s.n)
                requests += 1
                for j in range(s.n):
                    gen = torch.Generator().manual_seed(seed + j) if s.seeded else None
                    seqs.append(_Seq(prompt, s, (i, r * s.n + j), gen))
        # Interleave the prompts' requests so every step's batch mixes settings.
        order = sorted(range(len(seqs)), key=lambda x: (seqs[x].slot[1], seqs[x].slot[0]))
        seqs = [seqs[x] for x in order]
        drafted = accepted = 0
        while True:
            active = [q for q in seqs if not q.done]
            if not active:
                break
            drafts = [self._draft(q) if speculative else [] for q in active]
            probs = self._rows(active, drafts)
            u = torch.rand(len(active), 2 * (self.k + 1), generator=shared, dtype=torch.float64)
            for b, (q, d) in enumerate(zip(active, drafts)):
                if q.gen is not None:
                    u[b] = torch.rand(2 * (self.k + 1), generator=q.gen, dtype=torch.float64)
                emitted, took = self._verify(probs[b], d, u[b])
                drafted += len(d)
                accepted += took
                self._emit(q, emitted)
        outputs = [[[] for _ in range(job.n)] for _ in job.prompts]
        for q in seqs:
            outputs[q.slot[0]][q.slot[1]] = q.out
        return Samples(outputs, drafted=drafted if speculative else 0, accepted=accepted if speculative else 0,
                       requests=requests)

    def _draft(self, q: _Seq) -> list[int]:
        room = q.sampling.max_tokens - len(q.out) - 1
        if room <= 0:
            return []
        ctx = list(q.prompt) + q.out
        for n in (3, 2, 1):
            if len(ctx) <= n:
                continue
            tail = ctx[-n:]
            for start in range(len(ctx) - n - 1, -1, -1):
                if ctx[start:start + n] == tail:
                    return ctx[start + n:start + n + min(self.k, room)]
        return []

    def _rows(self, active: list[_Seq], drafts: list[list[int]]) -> list[torch.Tensor]:
        """Per request: ``[len(draft) + 1, V]`` processed laws of its verify rows."""
        V = self.vocab
        batch = [q.sampling for q in active]
        groups: dict = {}
        for b, (q, d) in enumerate(zip(active, drafts)):
            for r in range(len(d) + 1):
                ctx = q.out + d[:r]
                s = self.row_sampling(batch, b, r, len(d))
                groups.setdefault((q.prompt, s), []).append((b, r, ctx))
        out = [torch.zeros(len(d) + 1, V, dtype=torch.float64) for d in drafts]
        for (prompt, s), rows in groups.items():
            table = self.tables[prompt]
            digits = V ** torch.arange(self.length - 2, -1, -1)
            idx = torch.tensor([sum(t * int(w) for t, w in zip(ctx, digits)) for _, _, ctx in rows], dtype=torch.long)
            pos = torch.tensor([len(ctx) for _, _, ctx in rows], dtype=torch.long)
            logits = table.logits[idx, pos]
            counts = torch.stack([torch.bincount(torch.tensor(ctx, dtype=torch.long), minlength=V) if ctx
                                  else torch.zeros(V, dtype=torch.long) for _, _, ctx in rows])
            prompt_counts = torch.bincount(torch.tensor(prompt), minlength=V)
            p = self._profile.probs(logits, prompt_counts, counts, s)
            for (b, r, _), row in zip(rows, p):
                out[b][r] = row
        return out

    def _verify(self, probs: torch.Tensor, draft: list[int], u: torch.Tensor) -> tuple[list[int], int]:
        """Emitted tokens and accepted draft count for one request's step."""
        emitted = []
        for r, x in enumerate(draft):
            p = probs[r]
            if float(u[2 * r]) < float(self.accept_probability(p[x])):
                emitted.append(x)
                continue
            residual = p.clone()
            residual[x] = 0
            if float(residual.sum()) <= 0:
                residual = p
            emitted.append(_inverse_cdf(residual / residual.sum(), float(u[2 * r + 1])))
            return emitted, r
        emitted.append(_inverse_cdf(probs[len(draft)], float(u[2 * len(draft) + 1])))
        return emitted, len(draft)

    @staticmethod
    def _emit(q: _Seq, tokens: list[int]) -> None:
        for t in tokens:
            q.out.append(t)
            if t in q.sampling.stop_tokens or len(q.out) >= q.sampling.max_tokens:
                q.done = True
                return


def _inverse_cdf(p: torch.Tensor, u: float) -> int:
    cdf = p.cumsum(0)
    return min(int(torch.searchsorted(cdf, torch.tensor(u * float(cdf[-1]), dtype=cdf.dtype), right=True)),
               int((p > 0).nonzero().max()))
