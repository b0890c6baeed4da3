"""Speculative decoding in a hand-written loop, without SpeculativeDecoder.

For people with their own inference stack: the four pieces are the proposer (drafts a tree), the
target adapter (one verify forward + KV compaction), the exact sampler, and the proposer's commit.

    python examples/custom_loop.py                     # tiny random model, greedy (seconds)
    python examples/custom_loop.py --temperature 0.7   # sampled: the same loop, exact in law
    python examples/custom_loop.py --default           # embedded SmolLM2-135M-Instruct

The tiny model's greedy answer to its prompt falls into a repeating cycle after a few tokens, which
the suffix proposer then drafts from (its own output is text it has seen), so the printed tokens per
step shows speculation at work.
"""

import argparse

import torch

from specdec.sampling.params import SamplingParams
from specdec.models import load_default, tiny_model
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixDrafting
from specdec.sampling.rejection import rejection_sample
from specdec.verify.hf import HFTarget


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--default", action="store_true", help="use the embedded SmolLM2 instead of a tiny model")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    args = ap.parse_args(argv)

    if args.default:
        model, tok = load_default()
        prompt = tok.apply_chat_template([{"role": "user", "content": "List the days of the week twice."}],
                                         add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    else:
        model, tok = tiny_model("llama"), None
        prompt = [8, 9]
    target = HFTarget(model)
    proposer = SuffixProposer(target.vocab_size, drafting=SuffixDrafting(min_match_len=1))
    params = SamplingParams(temperature=args.temperature)
    gen = torch.Generator().manual_seed(0)

    # Prefill: the prompt's K/V go to the cache; its last logits give the first token.
    state, logits, _ = target.prefill([prompt])
    first = rejection_sample(_empty(target), params.process(logits[:1]), generator=gen).tokens.tolist()
    output = list(first)
    proposer.begin("req", prompt)
    proposer.commit("req", first)
    target.set_pending(state, first[-1:])

    steps = 0
    while len(output) < args.max_new_tokens:
        tree = proposer.propose(["req"], 8)[0]                       # 1. propose
        out = target.verify(state, [tree])                          # 2. verify: one forward
        probs = params.process(out.logits[0, : 1 + tree.num_nodes])  #    [n + 1, V] processed target
        res = rejection_sample(tree, probs, generator=gen)          # 3. accept (exact)
        emitted = res.tokens.tolist()
        target.commit(state, [res.path.tolist()], emitted[-1:])  # 4. commit: KV compaction
        proposer.commit("req", emitted)
        output += emitted
        steps += 1
    proposer.end("req")
    output = output[: args.max_new_tokens]
    print(tok.decode(output) if tok is not None else output)
    print(f"{len(output)} tokens in {steps} verify steps ({(len(output) - 1) / max(steps, 1):.2f} tokens/step)")
    return output


def _empty(target):
    from specdec import DraftTree

    return DraftTree.empty(vocab_size=target.vocab_size)


if __name__ == "__main__":
    main()
