"""Pieces shared by sub-commands: loading the target, building proposers by spec, progress lines."""

from __future__ import annotations

import argparse
import os
import sys
import time

from .args import PROPOSER_SPECS, budget

__all__ = ["PROPOSER_SPECS", "add_budget_arg", "load_target", "log", "make_proposer", "resolve_device"]


def log(msg: str) -> None:
    """A progress line on stderr, time-stamped (stdout carries the command's results)."""
    print(f"[specdec {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def add_budget_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", type=budget, default="auto",
                   help="draft nodes verified per step: 'auto' (measured cost model, calibrated at start) or an int")


def resolve_device(name: str) -> str:
    """``--device``: ``auto`` (CUDA when torch sees it), ``cpu`` or ``cuda`` (refused without a GPU)."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda requested but torch sees no CUDA device")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"--device must be auto, cpu or cuda, got {name!r}")
    return name


def warn_if_oversubscribed() -> None:
    """Warn when other work keeps the cores busy and torch would run a thread per core (OpenMP pools
    then stall at every barrier)."""
    import torch

    cores, threads, load = os.cpu_count() or 1, torch.get_num_threads(), os.getloadavg()[0]
    if threads > 1 and load + threads > cores + 0.5:
        log(f"warning: load average {load:.1f} on {cores} cores and torch runs {threads} threads: the machine is "
            "oversubscribed and timings will suffer; --threads 1 (or an idle machine) avoids the stalls")


def load_target(args):
    """``(model, tokenizer)`` from ``--model`` (``"default"``: the embedded SmolLM2; see
    :func:`specdec.models.load_target`)."""
    import torch

    from ..models import load_target as load

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    warn_if_oversubscribed()
    model, tok, _ = load(args.model or "default")
    return model, tok


def make_proposer(spec: str, model, tokenizer=None, *, allow_mismatch: bool = False):
    """A fresh proposer from a spec (:data:`PROPOSER_SPECS`; ``none``: None); ``allow_mismatch`` loads
    artifacts bound elsewhere with a warning."""
    if spec == "none":
        return None
    from ..proposers.registry import make_proposer as from_spec

    if allow_mismatch:
        print(f"specdec: WARNING: --allow-mismatch: {spec} is used even if it was built for another checkpoint",
              file=sys.stderr)
    return from_spec(spec, model, tokenizer, allow_mismatch=allow_mismatch)
