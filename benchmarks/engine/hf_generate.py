"""``model.generate`` against ``custom_generate=specdec.integrations.hf.generate``, same run (issue 33).

Per Spec-Bench category, at batch sizes 1, 4 and 8 (left-padded batches of each category's prompts),
greedy, on SmolLM2-135M-Instruct (CPU), every batch through every method in turn:

* ``hf_generate``: plain ``model.generate`` (the baseline of every speedup, at the same batch size);
* ``hf_prompt_lookup``: Hugging Face's prompt lookup (``prompt_lookup_num_tokens``, batch 1 only);
* ``hf_assisted``: Hugging Face's assisted decoding, with ``--assistant-model DIR`` (batch 1 only), and
  ``custom_generate:assistant``, the same assistant mapped onto specdec's draft-model proposer;
* ``custom_generate:suffix`` and ``custom_generate:hybrid:suffix+eagle:<dir>``: specdec through
  ``model.generate``, one decoder per batch size reused across its calls (the verify cost curve is
  measured once, before timing).

Reports tokens/s and the speedup over ``hf_generate`` at the same batch size, plus how many rows
differ from ``hf_generate``'s (greedy: exact methods should differ only where the batched float
arithmetic of a left-padded batch flips a near-tie). This is ``specdec bench --custom-generate`` with
this benchmark's default methods: every ``specdec bench`` flag applies (``--prompts``,
``--per-category``, ``--max-new-tokens``, ``--batch-sizes``, ``--proposers``, ``--cost``, ``--out``, ...).

No draft model for SmolLM2 ships with specdec: without ``--assistant-model`` the assisted rows are
left out (a tiny random draft sharing the tokenizer would accept nothing and measure nothing).

Run from the repository root: ``python -m benchmarks.engine.hf_generate --help``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_EAGLE3 = ROOT / "artifacts" / "eagle3-smollm2-135m"
EAGLE = _EAGLE3 if _EAGLE3.is_dir() else None


def default_proposers() -> list[str]:
    """``suffix`` and, when an EAGLE artifact for SmolLM2 is in the checkout, the suffix + EAGLE hybrid."""
    return ["suffix"] + ([f"hybrid:suffix+eagle:{EAGLE}"] if EAGLE is not None else [])


def main(argv=None) -> int:
    from specdec.cli import main as cli

    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = any(a.startswith("--proposer") for a in argv)
    return cli(["bench", "--custom-generate", *([] if chosen else ["--proposers", ",".join(default_proposers())]),
                *argv])


if __name__ == "__main__":
    sys.exit(main())
