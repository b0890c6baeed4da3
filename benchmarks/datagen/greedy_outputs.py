"""Generate SmolLM2-135M-Instruct greedy outputs for the dev prompts (input to the acceptance replay).

For the first ``--per-category`` prompts of every category in the prompts file, formats the first
turn with the chat template, runs Hugging Face ``generate`` greedily for ``--max-new-tokens`` and
writes one JSON line per prompt: ``{category, question_id, prompt_ids, output_ids}``. The output
folder ``benchmarks/data/`` is git-ignored: rerun this script to recreate it.

``--batch B`` generates B prompts per ``generate`` call, left-padded (about B/2 times the answers per
second on 2 cores). Padding changes float rounding, so a batched answer can leave the unbatched
greedy one where two logits nearly tie; the answers are still the model's own greedy text, which is
all the acceptance replays need. Equality with the engine is tested elsewhere, never on this file.

    nice python -m benchmarks.datagen.greedy_outputs --per-category 2 --max-new-tokens 64 [--batch 8]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import torch

from benchmarks.common.answers import DEFAULT_DATA
from benchmarks.common.paths import DEV_PROMPTS
from specdec.models import load_default
from specdec.prompts import chat_ids


def select_prompts(path: str, per_category: int) -> list[dict]:
    rows, seen = [], {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if seen.get(row["category"], 0) < per_category:
                seen[row["category"]] = seen.get(row["category"], 0) + 1
                rows.append(row)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default=str(DEV_PROMPTS))
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1, help="prompts per generate() call (left-padded)")
    ap.add_argument("--out", default=str(DEFAULT_DATA))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok = load_default()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if args.batch < 1:
        raise SystemExit(f"--batch must be >= 1, got {args.batch}")
    rows = select_prompts(args.prompts, args.per_category)
    tok.padding_side = "left"
    with open(out, "w") as f:
        for start in range(0, len(rows), args.batch):
            chunk = rows[start : start + args.batch]
            prompts = [chat_ids(tok, r["turns"][0]) for r in chunk]
            width = max(len(p) for p in prompts)
            ids = torch.full((len(chunk), width), tok.eos_token_id, dtype=torch.long)  # [B, width], left-padded
            mask = torch.zeros_like(ids)
            for i, p in enumerate(prompts):
                ids[i, width - len(p):] = torch.tensor(p)
                mask[i, width - len(p):] = 1
            with torch.no_grad():
                gen = model.generate(ids, attention_mask=mask, max_new_tokens=args.max_new_tokens,
                                     do_sample=False, pad_token_id=tok.eos_token_id)
            for i, (row, prompt) in enumerate(zip(chunk, prompts)):
                output = gen[i, width:].tolist()
                if tok.eos_token_id in output:  # rows that finished early are padded with EOS after it
                    output = output[: output.index(tok.eos_token_id) + 1]
                record = {"category": row["category"], "question_id": row["question_id"],
                          "prompt_ids": prompt, "output_ids": output}
                f.write(json.dumps(record) + "\n")
                print(f"{row['category']:>15} q{row['question_id']}: {len(output)} tokens "
                      f"({time.time() - t0:.0f} s)", flush=True)

if __name__ == "__main__":
    main()
