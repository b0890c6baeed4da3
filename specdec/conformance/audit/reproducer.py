"""Standalone reproducers: one script per finding that needs only the engine and numpy.

For every biased or broken case, :func:`write_reproducers` writes ``<engine>-<method>-<setting>.py``
and the case's exact laws (``.npz``, one ``float64 [(V + 1) ** L]`` array per prompt and setting
part, the audit's base-``V + 1`` coding, END = ``V`` after a stop). The script runs the engine the
way the audit did (the adapter writes that part: ``generate(speculative) -> outputs[prompt][sample]``,
via the engine's ``reproducer_source(job, model_dir)``) and G-tests the outputs against the laws
with the same pooling rule as :func:`specdec.conformance.suite.g_test`, in numpy (the chi-square
tail is the regularised upper incomplete gamma function, written out), so an upstream maintainer
can run it without specdec.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from .runner import AuditReport, _jobs

_TEMPLATE = '''#!/usr/bin/env python3
"""Reproducer written by `specdec audit`: {engine}/{method}, setting `{setting}` ({description}).

Finding: {verdict}{scope}: {reason}
{message}
Needs only the engine and numpy. {npz} holds the exact law of the first {length} tokens of each
prompt under the setting, enumerated from the same checkpoint by specdec's audit. This script
samples the engine, {samples} completions per prompt and setting part, and G-tests tokens
{windows} against that law; a p-value below {alpha:.2e} (the audit's per-test level) reproduces the
finding. `python {script} --plain` runs the same requests without speculation (the control).
"""
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LAWS = np.load(os.path.join(HERE, "{npz}"))
VOCAB, LENGTH, WINDOWS, ALPHA = {vocab}, {length}, {windows}, {alpha!r}
MODEL = {model}

{engine_source}

def chi2_sf(x, k):
    """P(chi2_k > x): the regularised upper incomplete gamma Q(k / 2, x / 2)."""
    a, x = k / 2.0, x / 2.0
    if x <= 0:
        return 1.0
    if x < a + 1:  # series for P, then Q = 1 - P
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-15:
            n += 1
            term *= x / n
            total += term
        return max(0.0, 1.0 - total * math.exp(-x + a * math.log(x) - math.lgamma(a)))
    b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)  # continued fraction for Q (Lentz)
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def g_stat(counts, probs):
    """G and dof of counts against probabilities; cells expected below 5 pooled (a sparse pool
    joins the smallest kept cell). Counts in a cell of probability 0: G = inf."""
    n = counts.sum()
    if counts[probs <= 0].sum():
        return math.inf, 0
    keep = probs > 0
    obs, exp = counts[keep].astype(float), probs[keep] * n
    sparse = exp < 5
    if sparse.any():
        po, pe = obs[sparse].sum(), exp[sparse].sum()
        obs, exp = obs[~sparse], exp[~sparse]
        if pe < 5 and obs.size:
            j = int(exp.argmin())
            obs[j] += po
            exp[j] += pe
        else:
            obs, exp = np.append(obs, po), np.append(exp, pe)
    nz = obs > 0
    return float(2 * (obs[nz] * np.log(obs[nz] / exp[nz])).sum()), obs.size - 1


def main():
    speculative = "--plain" not in sys.argv
    outputs = generate(speculative)
    worst = 1.0
    for first, last in WINDOWS:
        g_sum, dof_sum = 0.0, 0
        for i, samples in enumerate(outputs):
            seqs = np.full((len(samples), LENGTH), VOCAB)
            for j, toks in enumerate(samples):
                toks = list(toks)[:LENGTH]
                seqs[j, :len(toks)] = toks
            law = LAWS["law%d" % i].reshape([VOCAB + 1] * LENGTH)
            outside = tuple(k for k in range(LENGTH) if not first - 1 <= k < last)
            probs = (law.sum(axis=outside) if outside else law).reshape(-1)
            code = np.zeros(len(seqs), dtype=np.int64)
            for k in range(first - 1, last):
                code = code * (VOCAB + 1) + seqs[:, k]
            g, dof = g_stat(np.bincount(code, minlength=probs.size), probs)
            g_sum, dof_sum = g_sum + g, dof_sum + dof
        p = 0.0 if math.isinf(g_sum) else chi2_sf(g_sum, dof_sum) if dof_sum else 1.0
        worst = min(worst, p)
        print("tokens %d-%d: G = %.1f, dof = %d, p = %.3g" % (first, last, g_sum, dof_sum, p))
    arm = "with" if speculative else "without"
    verdict = "REJECTED: not the model's law" if worst < ALPHA else "consistent with the model's law"
    print("%s speculation: %s (smallest p %.3g, level %.2e)" % (arm, verdict, worst, ALPHA))


if __name__ == "__main__":
    main()
'''


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def write_reproducers(report: AuditReport, engine, folder: Path) -> list[Path]:
    """A script and its laws for each ``biased`` / ``error`` case of ``report``, when ``engine`` has
    ``reproducer_source``; returns the files written."""
    make = getattr(engine, "reproducer_source", None)
    if make is None:
        return []
    cfg = report.config
    jobs = dict(zip(cfg.settings, _jobs(cfg, cfg.seed)))
    vocab = None
    written = []
    for case in report.cases:
        if case.verdict.verdict not in ("biased", "error"):
            continue
        job = jobs[case.setting]
        source = make(job)
        if source is None:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        laws = [report.laws[(p, s)] for p, s in zip(job.prompts, job.sampling)] if (job.prompts[0], job.sampling[0]) \
            in report.laws else []
        if not laws:
            continue
        vocab = round(laws[0].numel() ** (1 / cfg.length)) - 1
        name = _slug(f"{report.engine.get('engine')}-{report.engine.get('method')}-{case.setting}")
        npz = folder / f"{name}.npz"
        np.savez_compressed(npz, **{f"law{i}": law.numpy() for i, law in enumerate(laws)})
        model_dir = getattr(engine, "model_dir", None)
        script = folder / f"{name}.py"
        script.write_text(_TEMPLATE.format(
            engine=report.engine.get("engine"), method=report.engine.get("method"), setting=case.setting,
            description=case.description, verdict=case.verdict.verdict,
            scope=f" ({case.verdict.scope})" if case.verdict.scope else "", reason=case.verdict.reason,
            message=f"Engine message: {case.message}" if case.message else "", npz=npz.name, length=cfg.length,
            samples=cfg.samples, windows=json.dumps([list(w) for w in cfg.windows]), alpha=cfg.per_test_alpha,
            script=script.name, vocab=vocab, model=repr(str(model_dir)) if model_dir else "None",
            engine_source=source))
        written += [script, npz]
    return written
