"""``specdec audit``: does this engine's speculative decoding still sample from the model's own law?

Runs :func:`specdec.conformance.audit.audit` on one engine and one or more speculative methods,
under every sampling setting (or ``--settings``, or ``--quick``'s four), on the audit's tiny target
(built now, saved under ``--out`` for engines that load checkpoints), and writes ``audit.md``,
``audit.json`` and a reproducer per finding into ``--out``. With ``--greedy N`` it also compares N
SmolLM2 dev prompts token for token with and without speculation.

Exit status: 0 when every case is exact or refused (a refusal is the engine's answer, not a
failure), 1 when a case is biased, broke the engine, or is inconclusive (never a pass), 2 on a
usage error (before any engine starts).

Engines and methods (``--engine`` / ``--methods``):

* ``specdec``: ``suffix`` (specdec's own decoder);
* ``hf``: ``prompt_lookup``, ``assistant_model``, ``specdec`` (specdec's ``custom_generate``);
* ``vllm``: ``ngram``, ``suffix``, ``draft_model``, ``custom_class``, ``eagle``, ``eagle3`` (run with
  ``--python`` that has vLLM; ``--cpu-expand`` for vLLM issue 55005 on the CPU build;
  ``--extra-path`` for ArcticInference's suffix module);
* ``llamacpp``: ``prompt_lookup`` (``--python`` that has llama-cpp-python);
* ``vllm-server``: two running vLLM servers (``--url`` speculating, ``--plain-url`` not) serving the
  audit target, written by ``python -m specdec.conformance.audit.fixtures DIR`` (the servers'
  ``--served-model-name`` goes to ``--served-model``); ``--methods`` only labels the report;
* ``reference``: the audit's own honest reference engine (a self-check).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .args import UsageError, bounded, csv, positive, positive_int

ENGINES = {"specdec": ("suffix",), "hf": ("prompt_lookup", "assistant_model", "specdec"),
           "vllm": ("ngram", "suffix", "draft_model", "custom_class", "eagle", "eagle3"),
           "llamacpp": ("prompt_lookup",), "reference": ("ngram",), "vllm-server": ()}
FIX_MODULE = "specdec.integrations.vllm.cpu_sampling"
"""specdec's fix for vLLM issue 55005, handed to the vLLM worker by name."""
FULL = {"samples": 600, "max_tv": 0.12}
QUICK_SIZES = {"samples": 250, "max_tv": 0.2}


def _engines(args, model, out: Path) -> list:
    """One engine per method (built before anything runs; bad combinations refused here)."""
    from ..conformance.audit.fixtures import audit_draft, save_checkpoint, save_eagle_checkpoint

    if args.engine == "vllm-server":
        from ..conformance.audit.adapters.vllm_server import VLLMServerEngine

        if not (args.url and args.plain_url):
            raise UsageError("--engine vllm-server needs --url (speculating) and --plain-url (not speculating)")
        save_checkpoint(model, out / "model")  # what the servers must serve
        label = args.methods[0] if args.methods else "speculative"
        return [VLLMServerEngine(args.url, args.plain_url, args.served_model or str(out / "model"), method=label)]
    methods = args.methods or [ENGINES[args.engine][0]]
    bad = [m for m in methods if m not in ENGINES[args.engine]]
    if bad:
        raise UsageError(f"--methods {bad} are not methods of {args.engine}; known: {', '.join(ENGINES[args.engine])}")
    if args.engine == "reference":
        from ..conformance.audit.honest_engine import ReferenceEngine

        return [ReferenceEngine(model, args.length)]
    if args.engine == "specdec":
        from ..conformance.audit.adapters.specdec_decoder import SpecdecEngine

        return [SpecdecEngine(model, budget=args.k)]
    if args.engine == "hf":
        from ..conformance.audit.adapters.hf_engine import HFEngine

        draft = audit_draft(model) if "assistant_model" in methods else None
        return [HFEngine(model, m, draft=draft, k=args.k) for m in methods]
    ckpt = save_checkpoint(model, out / "model")
    if args.engine == "llamacpp":
        from ..conformance.audit.adapters.llamacpp import LlamaCppEngine

        return [LlamaCppEngine(ckpt, args.python or sys.executable, k=args.k)]
    from ..conformance.audit.adapters.vllm import VLLMEngine

    draft = save_checkpoint(audit_draft(model), out / "draft") if "draft_model" in methods else None
    if "eagle3" in methods and args.eagle is None:
        raise UsageError("--methods eagle3 needs --eagle DIR (an EAGLE-3 checkpoint for the audit target)")
    eagle = args.eagle
    if eagle is None and "eagle" in methods:
        eagle = save_eagle_checkpoint(model, out / "eagle")
    engines = []
    for m in methods:
        modes = args.cpu_expand or ["as-shipped"]
        for mode in modes:
            if (mode == "put-back-55005") != (m == "custom_class") and mode != "as-shipped":
                continue  # put-back undoes the drafter's own fix; the drafter installs specdec-fix itself
            engines.append(VLLMEngine(ckpt, m, k=args.k, cpu_expand=mode, python=args.python,
                                      draft=eagle if m.startswith("eagle") else draft,
                                      extra_paths=args.extra_path or (), fix_module=FIX_MODULE))
    return engines


def _smollm2_folder() -> Path:
    """SmolLM2's converted safetensors folder (converted once, by :func:`specdec.models.load_default`)."""
    from ..models import DEFAULT_NAME, cache_dir, load_default

    folder = cache_dir() / DEFAULT_NAME
    if not (folder / "model.safetensors").exists():
        load_default()
    return folder


def _greedy_prompts(count: int) -> list[list[int]]:
    from importlib.resources import files

    from transformers import AutoTokenizer

    from ..prompts import encode_first_turn, read_prompt_records

    tok = AutoTokenizer.from_pretrained(_smollm2_folder())
    records = read_prompt_records(str(files("specdec") / "data" / "prompts_dev_sample.jsonl"))[:count]
    return [encode_first_turn(tok, r) for r in records]


def _greedy_engine(engine, out: Path):
    """The same engine and method over SmolLM2 (None where the method needs a draft SmolLM2 lacks)."""
    from ..conformance.audit.adapters.hf_engine import HFEngine
    from ..conformance.audit.adapters.llamacpp import LlamaCppEngine
    from ..conformance.audit.adapters.specdec_decoder import SpecdecEngine
    from ..conformance.audit.adapters.vllm import VLLMEngine

    if isinstance(engine, (SpecdecEngine, HFEngine)):
        from transformers import AutoModelForCausalLM

        if isinstance(engine, HFEngine) and engine.method == "assistant_model":
            return None
        smollm2 = AutoModelForCausalLM.from_pretrained(_smollm2_folder(), dtype="float32").eval()
        if isinstance(engine, SpecdecEngine):
            return SpecdecEngine(smollm2, budget=engine.budget)
        return HFEngine(smollm2, engine.method, k=engine.k)
    if isinstance(engine, (VLLMEngine, LlamaCppEngine)):
        from ..integrations.vllm.checkpoint import vllm_ready

        folder = vllm_ready(_smollm2_folder())
        if isinstance(engine, LlamaCppEngine):
            return LlamaCppEngine(folder, engine.python, k=engine.k, gguf=out / "smollm2.gguf")
        if engine.base_method in ("draft_model", "eagle", "eagle3"):
            return None
        return VLLMEngine(folder, engine.base_method, k=engine.k, cpu_expand=engine.cpu_expand, python=engine.python,
                          extra_paths=engine.extra_paths, max_num_seqs=32, fix_module=engine.fix_module)
    return None


def audit_main(args) -> int:
    import torch

    from ..conformance.audit import AuditConfig, audit, check_greedy, select
    from ..conformance.audit.fixtures import audit_prompts, audit_target
    from ..conformance.audit.report import markdown, write_report

    settings = select(args.settings, quick=args.quick)  # ValueError naming an unknown setting
    sizes = QUICK_SIZES if args.quick else FULL
    out = Path(args.out)
    torch.set_num_threads(max(1, args.threads))
    model = audit_target()
    config = AuditConfig(audit_prompts(model, args.prompts), settings, samples=args.samples or sizes["samples"],
                         length=args.length, seed=args.seed, plain_seed=args.plain_seed,
                         max_tv=args.max_tv or sizes["max_tv"])
    config.check(int(model.get_output_embeddings().weight.shape[0]))
    engines = _engines(args, model, out)
    t0 = time.time()

    def say(msg):
        print(f"[{time.time() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    reports, plain, greedy_plain = [], None, None
    greedy_prompts = _greedy_prompts(args.greedy) if args.greedy else None
    for engine in engines:
        report = audit(engine, model, config, plain_outcomes=plain, progress=say)
        plain = report.plain_outcomes  # the same engine without speculation: run once for every method
        if greedy_prompts is not None:
            g = _greedy_engine(engine, out)
            if g is not None:
                say(f"greedy: {args.greedy} SmolLM2 prompts")
                report.greedy = check_greedy(g, greedy_prompts, args.greedy_tokens, plain_outcome=greedy_plain)
                greedy_plain = report.greedy.plain_outcome
        reports.append(report)
    write_report(reports, out, engines=engines)
    print(markdown(reports))
    print(f"report: {out / 'audit.md'}, {out / 'audit.json'}", file=sys.stderr)
    verdicts = [c.verdict.verdict for r in reports for c in r.cases] + [
        r.greedy.verdict for r in reports if r.greedy is not None]
    return 1 if any(v in ("biased", "error", "inconclusive") for v in verdicts) else 0


def register(subparsers) -> None:
    """Add ``audit`` to a ``specdec`` argparse sub-parser collection."""
    p = subparsers.add_parser("audit", help="test an engine's speculative decoding for an unchanged output law")
    p.add_argument("--engine", required=True, choices=sorted(ENGINES))
    p.add_argument("--methods", type=csv, help="comma-separated speculative methods (default: the engine's first)")
    p.add_argument("--settings", type=csv, help="comma-separated settings (default: all; see docs/audit.md)")
    p.add_argument("--quick", action="store_true", help="four settings, smaller samples (target: < 2 min)")
    p.add_argument("--samples", type=positive_int,
                   help=f"completions per prompt, setting part and arm (default {FULL['samples']}; "
                        f"--quick {QUICK_SIZES['samples']})")
    p.add_argument("--prompts", type=bounded(int, 1, 16), default=3, help="prompts (strata), default 3")
    p.add_argument("--length", type=bounded(int, 2, 5), default=5, help="tokens per completion tested, default 5")
    p.add_argument("--k", type=bounded(int, 1, 8), default=3, help="draft tokens per step, default 3")
    p.add_argument("--max-tv", type=positive, help="inconclusive when the detectable TV is above this "
                                                   f"(default {FULL['max_tv']}; --quick {QUICK_SIZES['max_tv']})")
    p.add_argument("--seed", type=bounded(int, 0), default=0)
    p.add_argument("--plain-seed", type=bounded(int, 0), help="the plain arm's seed (must not overlap --seed's range)")
    p.add_argument("--python", help="the interpreter that has the engine (vllm, llamacpp)")
    p.add_argument("--cpu-expand", type=csv, help="vLLM issue 55005: as-shipped, specdec-fix, put-back-55005 "
                                                  "(comma-separated: one audit each)")
    p.add_argument("--extra-path", action="append", help="prepended to the vLLM worker's PYTHONPATH (repeatable)")
    p.add_argument("--eagle", help="EAGLE checkpoint folder for --methods eagle3 (eagle: default, a head "
                                   "built for the audit target)")
    p.add_argument("--url", help="vllm-server: base URL of the server that speculates")
    p.add_argument("--plain-url", help="vllm-server: base URL of the same model served without speculation")
    p.add_argument("--served-model", help="vllm-server: the served model name (default: the checkpoint path)")
    p.add_argument("--greedy", type=bounded(int, 0, 80), default=0,
                   help="also compare N SmolLM2 dev prompts greedily, token for token (default 0: off)")
    p.add_argument("--greedy-tokens", type=positive_int, default=64)
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads of the law enumeration")
    p.add_argument("--out", default="audit-report", help="report folder (default ./audit-report)")
    p.set_defaults(func=_checked)


def _checked(args) -> int:
    from ..conformance.audit.adapters.vllm import CPU_EXPAND

    if args.cpu_expand and args.engine != "vllm":
        raise UsageError("--cpu-expand applies to --engine vllm")
    bad = [m for m in args.cpu_expand or () if m not in CPU_EXPAND]
    if bad:
        raise UsageError(f"--cpu-expand {bad}: choose from {', '.join(CPU_EXPAND)}")
    if args.engine == "llamacpp" and not args.python:
        raise UsageError("--engine llamacpp needs --python (the interpreter that has llama-cpp-python)")
    if args.plain_seed is not None and args.plain_seed == args.seed:
        raise UsageError("--plain-seed equals --seed: equal seeds correlate the arms and blind the two-sample test")
    return audit_main(args)
