"""End-to-end decoding benchmarks: plain, specdec proposers and Hugging Face assisted generation.

Every method decodes the same prompts in the same process, interleaved prompt by prompt (so
machine-load drift hits all methods alike), greedy, with the same ``max_new_tokens``. Speedups are
ratios of wall time against specdec's plain decoding measured in that run; greedy outputs of
exact methods are compared token for token against plain decoding and mismatches are reported.

The second half runs ``model.generate`` itself on left-padded batches (:func:`run_generate_benchmark`):
plain, Hugging Face's prompt lookup and assisted decoding (batch 1 only, as Hugging Face runs them)
and specdec through ``custom_generate``, with speedups over plain ``model.generate`` at the same
batch size (``python -m benchmarks.engine.hf_generate``, ``specdec bench --custom-generate``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch

from ..engine.decoder import SpeculativeDecoder
from ..models import clean_generate
from ..engine.metrics import RequestMetrics
from ..prompts import encode_first_turn, read_prompt_records

SAMPLE_PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts_dev_sample.jsonl"


@dataclass
class Prompt:
    category: str
    question_id: int
    text: str
    ids: list[int]


def load_prompts(path: str | Path, tokenizer, *, categories: Sequence[str] | None = None,
                 per_category: int | None = None) -> list[Prompt]:
    """First turn of each selected Spec-Bench record, chat-templated and tokenized (ValueError from
    :func:`specdec.prompts.read_prompt_records`)."""
    records = read_prompt_records(path, categories=categories, per_category=per_category)
    return [Prompt(r["category"], int(r.get("question_id", i)), r["turns"][0], encode_first_turn(tokenizer, r))
            for i, r in enumerate(records)]


@dataclass
class Run:
    """One method on one prompt."""

    method: str
    category: str
    seconds: float
    tokens: list[int]
    metrics: RequestMetrics | None = None


@dataclass
class Method:
    """A named way to decode: ``fn(prompt_ids, max_new_tokens) -> (tokens, metrics or None)``."""

    name: str
    fn: Callable[[list[int], int], tuple[list[int], RequestMetrics | None]]
    exact: bool = True


def specdec_method(name: str, decoder: SpeculativeDecoder, stop_tokens: Sequence[int]) -> Method:
    def fn(ids, n):
        res = decoder.generate(ids, n, stop_tokens=stop_tokens)
        return res.tokens, res.metrics

    return Method(name, fn)


def hf_method(name: str, model, stop_tokens: Sequence[int], **generate_kwargs) -> Method:
    """``model.generate`` greedy (plus assisted-generation kwargs), same stop tokens, without the
    checkpoint's generation defaults (:func:`specdec.models.clean_generate`)."""
    eos = list(stop_tokens) or None

    def fn(ids, n):
        out = clean_generate(model, torch.tensor([ids]), max_new_tokens=n, eos_token_id=eos,
                             pad_token_id=eos[0] if eos else 0, **generate_kwargs)
        return out[0, len(ids):].tolist(), None

    return Method(name, fn)


def run_benchmark(methods: Sequence[Method], prompts: Sequence[Prompt], max_new_tokens: int,
                  progress: Callable[[Iterable], Iterable] = lambda x: x) -> list[Run]:
    """Each prompt through every method in turn (after one warm-up generation per method)."""
    for m in methods:
        m.fn(prompts[0].ids, 4)
    runs = []
    for p in progress(prompts):
        for m in methods:
            t0 = time.perf_counter()
            tokens, metrics = m.fn(p.ids, max_new_tokens)
            runs.append(Run(m.name, p.category, time.perf_counter() - t0, tokens, metrics))
    return runs


@dataclass
class Row:
    method: str
    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    accepted: int = 0
    requests: int = 0
    mismatches: int = 0
    speedup: float = field(default=float("nan"))
    baseline: str = "plain"

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def accepted_drafts_per_step(self) -> float | None:
        return self.accepted / self.steps if self.steps else None

    @property
    def tokens_per_step(self) -> float | None:
        """Emitted tokens per verify step (bonus included); the prefill's first token is not a step."""
        return (self.tokens - self.requests) / self.steps if self.steps else None


def summarize(runs: Sequence[Run], baseline: str = "plain") -> dict[str, dict[str, Row]]:
    """``{category (and "overall"): {method: Row}}``; speedup = the method's baseline seconds (see
    :func:`baseline_of`) / method seconds."""
    reference = {}
    for r in runs:
        if r.method == baseline:
            reference.setdefault(r.category, []).append(r.tokens)
    seen: dict[tuple[str, str], int] = defaultdict(int)
    table: dict[str, dict[str, Row]] = defaultdict(dict)
    for r in runs:
        i = seen[(r.method, r.category)]
        seen[(r.method, r.category)] += 1
        for cat in (r.category, "overall"):
            row = table[cat].setdefault(r.method, Row(r.method))
            row.tokens += len(r.tokens)
            row.seconds += r.seconds
            row.requests += 1
            if r.metrics is not None:
                row.steps += r.metrics.steps
                row.accepted += r.metrics.accepted
            ref = reference.get(r.category)
            if ref is not None and ref[i] != r.tokens:
                row.mismatches += 1
    for rows in table.values():
        for row in rows.values():
            row.baseline = baseline_of(row.method, rows, baseline)
            base = rows.get(row.baseline)
            if base is not None and row.seconds:
                row.speedup = base.seconds / row.seconds
    return dict(table)


def baseline_of(method: str, rows: dict, baseline: str = "plain") -> str:
    """Each method's baseline: HF assisted methods against ``hf_generate`` when run, the rest against
    ``baseline`` (a faster plain path in one stack is not credited to speculation)."""
    if method.startswith("hf_") and method != "hf_generate" and "hf_generate" in rows:
        return "hf_generate"
    return baseline


def markdown(table: dict[str, dict[str, Row]], header: str = "") -> str:
    """One markdown table per category (then overall)."""
    lines = [header] if header else []
    cats = sorted(c for c in table if c != "overall") + (["overall"] if "overall" in table else [])
    for cat in cats:
        lines += [f"\n### {cat}\n", "| method | tokens/s | speedup | vs | tokens/step | accepted drafts/step "
                  "| output mismatches |", "|---|---:|---:|---|---:|---:|---:|"]
        for row in table[cat].values():
            tau = "-" if row.tokens_per_step is None else f"{row.tokens_per_step:.2f}"
            acc = "-" if row.accepted_drafts_per_step is None else f"{row.accepted_drafts_per_step:.2f}"
            lines.append(f"| {row.method} | {row.tokens_per_s:.1f} | {row.speedup:.2f}x | {row.baseline} | {tau} "
                         f"| {acc} | {row.mismatches} |")
    return "\n".join(lines) + "\n"


def plot(table: dict[str, dict[str, Row]], path: str | Path) -> None:
    """Grouped bar chart of speedup vs plain per category and method (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = sorted(c for c in table if c != "overall") + ["overall"]
    methods = [m for m in next(iter(table.values())) if m != "plain"]
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(cats)), 4))
    for j, m in enumerate(methods):
        vals = [table[c][m].speedup if m in table[c] else 0 for c in cats]
        ax.bar([i + j * width for i in range(len(cats))], vals, width, label=m)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cats))])
    ax.set_xticklabels(cats, rotation=30, ha="right")
    ax.set_ylabel("speedup vs own plain decoding (wall time)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def online_speedup(model, proposer, prompts: Sequence[Sequence[int]], budget: int | str, max_new_tokens: int,
                   name: str = "speculative", max_budget: int = 16) -> dict:
    """Same-run wall clock of plain decoding vs ``proposer`` (greedy, ``budget`` int or ``"auto"`` up
    to ``max_budget``), interleaved per prompt after a warm-up; AssertionError if outputs differ."""
    prompts = [list(p) for p in prompts]
    if not prompts:
        raise ValueError("online_speedup needs at least one prompt")
    plain = SpeculativeDecoder(model, None)
    spec = SpeculativeDecoder(model, proposer, max_budget=max_budget if budget == "auto" else budget, budget=budget)
    plain.generate(prompts[0], 4)
    spec.generate(prompts[0], 4)
    plain_s = spec_s = 0.0
    ref, outs = [], []
    for p in prompts:  # interleaved per prompt, so load drift hits both alike
        t0 = time.perf_counter()
        ref.append(plain.generate(p, max_new_tokens).tokens)
        t1 = time.perf_counter()
        outs.append(spec.generate(p, max_new_tokens))
        plain_s, spec_s = plain_s + t1 - t0, spec_s + time.perf_counter() - t1
    if [o.tokens for o in outs] != ref:
        raise AssertionError(f"{name} decoding differs from plain greedy decoding")
    steps = sum(o.metrics.steps for o in outs)
    return {"prompts": len(prompts), "max_new_tokens": max_new_tokens, "budget": budget,
            # the prefill's token is not a verify step's: (tokens - 1) / steps, as RequestMetrics defines it
            "tokens_per_step": round(sum(len(o.tokens) - 1 for o in outs) / max(steps, 1), 3),
            "plain_s": round(plain_s, 2), f"{name}_s": round(spec_s, 2), "speedup": round(plain_s / spec_s, 3)}


def load_note(load_start: float, load_end: float, cores: int) -> str:
    """The 1-minute load average at start and end, with a warning when it exceeded the core count
    (OpenMP pools then stall at every barrier: repeat such a run, do not quote it)."""
    text = f"load average {load_start:.1f} -> {load_end:.1f} on {cores} cores"
    # The end reading counts the benchmark's own threads: a run using every core reads about
    # `cores` by itself, so only a clear excess (half a runnable thread) means contention.
    if max(load_start, load_end) > cores + 0.5:
        text += ("; WARNING: the machine was oversubscribed during this run, multi-threaded timings are "
                 "unreliable: rerun on an idle machine before quoting them")
    return text



# ---------------------------------------------------------------------------------------------------
# model.generate, batched: plain, Hugging Face's speculation, and specdec through custom_generate


@dataclass
class GenerateMethod:
    """A named way to call ``model.generate`` on a left-padded batch:
    ``fn(input_ids, attention_mask, max_new_tokens) -> (sequences, metrics or None)``; ``max_batch``:
    the largest batch it runs (Hugging Face's assisted decoding: 1)."""

    name: str
    fn: Callable
    max_batch: int | None = None


@dataclass
class BatchRun:
    """One method on one batch of one category: wall time, emitted tokens (EOS included, padding not),
    verify steps and accepted drafts (specdec methods), each row's new tokens."""

    method: str
    category: str
    batch: int
    seconds: float
    tokens: int
    steps: int
    accepted: int
    rows: list


def left_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of ``rows`` left-padded with ``pad_id``, as ``generate`` takes a batch."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (width - len(r)) + list(r) for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def generate_method(name: str, model, eos_id: int | None, pad_id: int, *, max_batch: int | None = None,
                    **generate_kwargs) -> GenerateMethod:
    """``model.generate`` greedy under library-default settings (:func:`specdec.models.clean_generate`),
    plus ``generate_kwargs`` (``prompt_lookup_num_tokens``, ``custom_generate``, ...)."""
    specdec = "custom_generate" in generate_kwargs

    def fn(ids, mask, n):
        out = clean_generate(model, ids, max_new_tokens=n, pad_token_id=pad_id, eos_token_id=eos_id,
                             attention_mask=mask, **({"return_dict_in_generate": True} if specdec else {}),
                             **generate_kwargs)
        return (out.sequences, out.metrics) if specdec else (out, None)

    return GenerateMethod(name, fn, max_batch)


def _emitted(row: list[int], eos_id: int | None) -> list[int]:
    return row[: row.index(eos_id) + 1] if eos_id is not None and eos_id in row else row


def run_generate_benchmark(methods_for: Callable[[int], Sequence[GenerateMethod]], prompts: Sequence[Prompt],
                           batch_sizes: Sequence[int], max_new_tokens: int, eos_id: int | None, pad_id: int,
                           progress: Callable[[Iterable], Iterable] = lambda x: x) -> list[BatchRun]:
    """Per batch size ``b`` (methods fresh from ``methods_for(b)``): each category's prompts in batches
    of ``b`` (in file order), every batch through every method in turn after one short warm-up call
    per method. A method whose ``max_batch`` is below ``b`` is not run at ``b``."""
    by_cat: dict[str, list[Prompt]] = defaultdict(list)
    for p in prompts:
        by_cat[p.category].append(p)
    runs = []
    for b in batch_sizes:
        methods = [m for m in methods_for(b) if m.max_batch is None or m.max_batch >= b]
        chunks = [(cat, ps[i:i + b]) for cat, ps in by_cat.items() for i in range(0, len(ps) - b + 1, b)]
        if not chunks:
            raise ValueError(f"batch size {b}: no category has {b} prompts (raise --per-category)")
        ids, mask = left_padded([p.ids for p in chunks[0][1]], pad_id)
        for m in methods:
            m.fn(ids, mask, 4)
        for cat, chunk in progress(chunks):
            ids, mask = left_padded([p.ids for p in chunk], pad_id)
            for m in methods:
                t0 = time.perf_counter()
                seqs, metrics = m.fn(ids, mask, max_new_tokens)
                seconds = time.perf_counter() - t0
                rows = [_emitted(r, eos_id) for r in seqs[:, ids.shape[1]:].tolist()]
                runs.append(BatchRun(m.name, cat, b, seconds, sum(map(len, rows)),
                                     sum(x.steps for x in metrics) if metrics else 0,
                                     sum(x.accepted for x in metrics) if metrics else 0, rows))
    return runs


@dataclass
class GenerateCell:
    """One method, category and batch size in the summary."""

    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    accepted: int = 0
    mismatches: int = 0
    speedup: float = float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def summarize_generate(runs: Sequence[BatchRun], baseline: str = "hf_generate") -> dict:
    """``{batch: {category (and "overall"): {method: GenerateCell}}}``; speedup = the method's tokens/s
    over ``baseline``'s at the same batch size and category; mismatches = rows whose tokens differ
    from ``baseline``'s rows of the same batch."""
    index = _batch_index(runs)
    reference = {(r.batch, r.category, i): r.rows for r, i in zip(runs, index) if r.method == baseline}
    table: dict = defaultdict(lambda: defaultdict(dict))
    for r, i in zip(runs, index):
        ref = reference.get((r.batch, r.category, i))
        for cat in (r.category, "overall"):
            cell = table[r.batch][cat].setdefault(r.method, GenerateCell())
            cell.tokens += r.tokens
            cell.seconds += r.seconds
            cell.steps += r.steps
            cell.accepted += r.accepted
            if ref is not None:
                cell.mismatches += sum(a != b for a, b in zip(r.rows, ref))
    for by_cat in table.values():
        for cells in by_cat.values():
            base = cells.get(baseline)
            for cell in cells.values():
                if base is not None and base.tokens_per_s:
                    cell.speedup = cell.tokens_per_s / base.tokens_per_s
    return {b: dict(cats) for b, cats in table.items()}


def _batch_index(runs) -> list[int]:
    """Each run's index among the runs of its method, batch size and category (which batch it was)."""
    seen: dict = defaultdict(int)
    out = []
    for r in runs:
        key = (r.method, r.batch, r.category)
        out.append(seen[key])
        seen[key] += 1
    return out


def generate_markdown(summary: dict, header: str = "") -> str:
    """One table per batch size: a row per category (then overall), ``tokens/s (speedup)`` per method
    (``n/a`` where a method did not run at that size: Hugging Face's speculation runs at batch 1)."""
    lines = [header] if header else []
    methods = list(dict.fromkeys(m for cats in summary.values() for cells in cats.values() for m in cells))
    for b in sorted(summary):
        cats = summary[b]
        order = sorted(c for c in cats if c != "overall") + ["overall"]
        lines += [f"\n### batch {b}\n", "| category | " + " | ".join(methods) + " |",
                  "|---|" + "---:|" * len(methods)]
        for cat in order:
            cells = cats[cat]
            lines.append(f"| {cat} | " + " | ".join(_cell(cells.get(m)) for m in methods) + " |")
        extra = [f"{m}: {c.accepted / c.steps:.2f} accepted drafts/step, {c.mismatches} rows differ from hf_generate"
                 for m, c in cats["overall"].items() if c.steps]
        lines += [""] + [f"- {e}" for e in extra]
    return "\n".join(lines) + "\n"


def _cell(cell: GenerateCell | None) -> str:
    return "n/a" if cell is None else f"{cell.tokens_per_s:.1f} ({cell.speedup:.2f}x)"
