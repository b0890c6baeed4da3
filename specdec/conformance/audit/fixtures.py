"""The checkpoint, prompts and draft model an audit runs engines on (why they are built so: docs/audit.md).

``python -m specdec.conformance.audit.fixtures DIR [DRAFT_DIR]`` writes the target (and its draft) for
engines started by hand.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..targets import context_target, noisy_copy

VOCAB = 8


def audit_target(vocab: int = VOCAB, *, seed: int = 0):
    """The audit's target: a random fp32 Llama (hidden 128, 2 heads of 64, 2 layers), eval mode, no EOS."""
    model = context_target(vocab, hidden=128, heads=2, kv_heads=1, qk_scale=8.0, vo_scale=8.0, lm_scale=8.0,
                           seed=seed)
    model.config.head_dim = 64
    model.config.eos_token_id = None
    model.generation_config.eos_token_id = None
    model.config.bos_token_id = None
    model.generation_config.bos_token_id = None
    return model


def audit_draft(model, *, std: float = 0.15, seed: int = 1):
    """A draft model for ``model``: its weights with Gaussian noise of relative size ``std``."""
    return noisy_copy(model, std=std, seed=seed)


@torch.no_grad()
def audit_prompts(model, count: int = 3, *, start: int = 6, greedy: int = 24, seed: int = 0) -> tuple:
    """``count`` prompts: ``start`` random tokens, then the target's ``greedy`` greedy continuations."""
    vocab = int(model.get_output_embeddings().weight.shape[0])
    g = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(count):
        ids = torch.randint(0, vocab, (1, start), generator=g)
        for _ in range(greedy):
            ids = torch.cat([ids, model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
        prompts.append(tuple(int(t) for t in ids[0]))
    return tuple(prompts)


def save_eagle_checkpoint(model, path: Path) -> Path:
    """An EAGLE-1 head for ``model`` in vLLM's ``EagleLlamaForCausalLM`` layout that passes the target's hidden
    state through: ``fc.weight = [0 | I]``, one layer with zero output projections, embedding and LM head
    shared."""
    import json

    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    H = int(model.config.hidden_size)
    layer = model.model.layers[-1]
    tensors = {"fc.weight": torch.cat([torch.zeros(H, H), torch.eye(H)], 1)}
    for name, p in layer.named_parameters():
        if name.startswith("input_layernorm"):
            continue  # the first EAGLE layer has none
        t = p.detach().clone()
        if name in ("self_attn.o_proj.weight", "mlp.down_proj.weight"):
            t.zero_()
        tensors[f"layers.0.{name}"] = t.contiguous()
    save_file(tensors, str(path / "model.safetensors"))
    config = model.config.to_dict()
    config.update(num_hidden_layers=1, architectures=["LlamaForCausalLM"])
    (path / "config.json").write_text(json.dumps(config, indent=1))
    return path


def save_checkpoint(model, path: Path) -> Path:
    """Save ``model`` (weights, config, generation config) and a word-level tokenizer into ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    words = {f"t{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0").save_pretrained(path)
    return path


if __name__ == "__main__":
    import sys

    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m specdec.conformance.audit.fixtures DIR [DRAFT_DIR]")
    target = audit_target()
    print(save_checkpoint(target, Path(sys.argv[1])))
    if len(sys.argv) == 3:
        print(save_checkpoint(audit_draft(target), Path(sys.argv[2])))
