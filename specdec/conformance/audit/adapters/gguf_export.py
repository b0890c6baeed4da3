"""Write a Hugging Face Llama checkpoint folder as a float32 GGUF file llama.cpp can load.

Standalone on purpose: it runs in the Python that has llama-cpp-python (with numpy, ``gguf`` and
``safetensors``), which need not have torch or specdec, as
``python gguf_export.py CHECKPOINT_DIR OUT.gguf``. Only what the audit's tiny Llama uses is
covered (no biases, untied or tied LM head, RoPE without scaling); anything else is refused.

Tensor names are llama.cpp's. The query and key projections are permuted from Hugging Face's
rotate-half RoPE layout to the interleaved layout llama.cpp's ``llama`` architecture expects (the
same permutation llama.cpp's own converter applies). The vocabulary is written as a plain
SentencePiece-style list of the checkpoint's words (``t0``, ``t1``, ...): the audit feeds token ids
and never tokenises text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def export(checkpoint: Path, out: Path) -> Path:
    """Convert ``checkpoint`` (config.json + model.safetensors) into ``out``; returns ``out``."""
    import gguf
    from safetensors.numpy import load_file

    checkpoint, out = Path(checkpoint), Path(out)
    cfg = json.loads((checkpoint / "config.json").read_text())
    if cfg.get("model_type") != "llama" or cfg.get("attention_bias") or cfg.get("mlp_bias") or cfg.get("rope_scaling"):
        raise ValueError(f"{checkpoint}: only plain Llama checkpoints (no biases, no RoPE scaling) are exported")
    weights = load_file(str(checkpoint / "model.safetensors"))
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    vocab = cfg["vocab_size"]
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    w.add_rope_freq_base(float(theta))
    w.add_file_type(0)  # all float32
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([1] * vocab)  # normal tokens
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    if "lm_head.weight" not in weights:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    for name in sorted(weights):
        t = weights[name].astype(np.float32)
        if name in names:
            w.add_tensor(names[name], t)
            continue
        parts = name.split(".")
        key = ".".join(parts[3:-1])
        if parts[:2] != ["model", "layers"] or key not in per_layer:
            raise ValueError(f"{checkpoint}: tensor {name} has no llama.cpp counterpart here")
        if key == "self_attn.q_proj":
            t = _permute(t, heads)
        elif key == "self_attn.k_proj":
            t = _permute(t, kv)
        w.add_tensor(f"blk.{parts[2]}.{per_layer[key]}.{parts[-1]}", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


if __name__ == "__main__":
    export(Path(sys.argv[1]), Path(sys.argv[2]))
