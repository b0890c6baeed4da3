"""Shared pieces of the ``tests/integrations/test_hf_generate*.py`` tests: a character tokenizer for
tiny models, left padding, a forward counter and the oracle-tree proposer."""

from __future__ import annotations

import string

import torch

from specdec import DraftTree
from specdec.artifacts import Artifact

CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + "+-"
"""One character per token id of the tiny models' 64-token vocabulary (id ``i`` is ``CHARS[i]``)."""


def char_tokenizer(chars: str = CHARS):
    """A fast tokenizer with one token per character (decoding concatenates): what stop strings and
    tokenizer-bound drafters need, for a vocabulary of ``len(chars)`` ids."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}, unk_token=chars[0]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def left_pad(prompts, pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of ``prompts`` left-padded with ``pad``, as a tokenizer with
    ``padding_side='left'`` returns them."""
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


class ForwardCounter:
    """Counts forwards through a model's input embedding (every forward, HF's or specdec's, embeds);
    the hook is removed on exit."""

    def __init__(self, model):
        self.module, self.calls, self.handle = model.get_input_embeddings(), 0, None

    def __enter__(self):
        self.handle = self.module.register_forward_pre_hook(lambda *_: self._count())
        return self

    def _count(self):
        self.calls += 1

    def __exit__(self, *exc):
        self.handle.remove()


class OracleTreeProposer:
    """Drafts trees whose right answer is never the leading chain: root child 0 is a wrong token,
    root child 1 starts the reference continuation (keyed by prompt), chained to the budget. Every
    step then accepts a non-leading path (KV compaction's hardest case) whenever the output agrees
    with the reference."""

    requires_target_hidden = False

    def __init__(self, scripts: dict, vocab_size: int):
        self.scripts, self.vocab = {tuple(k): list(v) for k, v in scripts.items()}, vocab_size
        self.state: dict = {}
        self.artifact = Artifact("oracle-tree")

    def begin(self, req_id, prompt_ids, *, tenant=None, target_hidden=None):
        self.state[req_id] = (self.scripts.get(tuple(prompt_ids), []), [])

    def propose(self, req_ids, budget):
        out = []
        for i, rid in enumerate(req_ids):
            b = budget if isinstance(budget, int) else budget[i]
            script, done = self.state[rid]
            right = script[len(done): len(done) + max(b - 1, 0)] if script[: len(done)] == done else []
            if not right:
                out.append(DraftTree.empty(vocab_size=self.vocab))
                continue
            tokens = [(right[0] + 1) % self.vocab] + right
            parents = [-1, -1] + list(range(1, len(right)))
            out.append(DraftTree(torch.tensor(tokens), torch.tensor(parents, dtype=torch.int32), vocab_size=self.vocab))
        return out

    def commit(self, req_id, accepted_ids, *, target_hidden=None):
        self.state[req_id][1].extend(int(t) for t in accepted_ids)

    def end(self, req_id):
        del self.state[req_id]

    def memory_bytes(self):
        return 0
