"""What a transformers causal LM must offer to be verified exactly, read from the model, not its name.

:func:`inspect_model` returns :class:`TargetFeatures` or a ``ValueError`` naming the missing feature;
no ``model_type`` is known here. Required: a decoder-only causal LM (causal attention, a base model
under ``base_model_prefix``, an LM head); a base forward taking ``position_ids`` and a ``DynamicCache``
(nodes sit at ``prefix + depth``); ``eager`` or ``sdpa`` attention (a prepared 4-D mask); positions
from ``position_ids``, not the mask (no ALiBi); only ``full_attention`` / ``sliding_attention`` layers
(others cannot be compacted row by row); soft-capping only under ``eager``. The tree op has further
limits (:func:`tree_op_refusal`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from .patch import own_attention

FULL, SLIDING = "full_attention", "sliding_attention"
MASKABLE_ATTENTION = ("eager", "sdpa")


@dataclass(frozen=True)
class TargetFeatures:
    """What the verify adapter adapts to.

    Attributes:
        windows: per layer, sliding window ``W`` (a key is visible at most ``W - 1`` positions later)
            or None. ``layer_types``: ``config.layer_types`` when masks are keyed by layer type.
        max_positions: ``config.max_position_embeddings``, or None without a limit.
        attn_softcap: attention-logit soft-capping (eager only; not the tree op).
        final_softcap: ``cap * tanh(logits / cap)`` on the head's output; ``logit_scale``: the factor
            the head multiplies logits by (Granite, Cohere; else 1.0).
        attention_backend: layers call transformers' attention registry, so specdec's function can run.
    """

    windows: tuple[int | None, ...]
    layer_types: tuple[str, ...] | None
    max_positions: int | None
    attn_softcap: float | None
    final_softcap: float | None
    logit_scale: float
    attention_backend: bool

    @property
    def num_layers(self) -> int:
        return len(self.windows)

    @property
    def sliding(self) -> bool:
        """Some layer attends through a sliding window."""
        return any(w is not None for w in self.windows)

    @property
    def mixed(self) -> bool:
        """Layers differ in their window: the masks must be given per layer type."""
        return len(set(self.windows)) > 1

    def window_of(self, layer_type: str) -> int | None:
        return self.windows[self.layer_types.index(layer_type)]


def inspect_model(model) -> TargetFeatures:
    """The :class:`TargetFeatures` of ``model``, or ``ValueError`` naming what it lacks."""
    config = getattr(model, "config", None)
    name = type(model).__name__
    if config is None or not hasattr(model, "base_model_prefix"):
        raise ValueError(f"HFTarget needs a transformers causal LM (a PreTrainedModel with a config), got {name}")
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{name} is an encoder-decoder model: HFTarget verifies decoder-only causal LMs")
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    if text is not config:
        raise ValueError(f"{name} wraps a language model in a multimodal model: pass the causal LM itself "
                         f"(e.g. AutoModelForCausalLM over its text config)")
    base = getattr(model, model.base_model_prefix, None)
    if base is None or model.get_output_embeddings() is None:
        raise ValueError(f"{name} has no base model under {model.base_model_prefix!r} or no output embedding "
                         "(LM head): HFTarget runs the base model and computes the head itself")
    _check_forward(base, name)
    _check_causal(config, name)
    attn = own_attention(model)  # not specdec's switch while another thread's forward is inside
    if attn not in MASKABLE_ATTENTION:
        raise ValueError(f"{name} uses attn_implementation={attn!r}, which does not take a prepared 4-D tree mask: "
                         f"load it with attn_implementation='sdpa' or 'eager'")
    if getattr(config, "alibi", False) or getattr(config, "position_embedding_type", None) == "alibi":
        raise ValueError(f"{name} uses ALiBi, whose position bias comes from the 2-D attention mask, not from "
                         "position_ids: tree nodes would get their cache row as position")
    if getattr(config, "attention_chunk_size", None):
        raise ValueError(f"{name} uses chunked attention (attention_chunk_size={config.attention_chunk_size}): "
                         "not expressible in the tree mask")
    softcap = getattr(config, "attn_logit_softcapping", None)
    if softcap is not None and attn != "eager":
        raise ValueError(f"{name} soft-caps attention logits (attn_logit_softcapping={softcap}), which "
                         f"attn_implementation={attn!r} cannot apply: load it with attn_implementation='eager'")
    windows, layer_types = _layer_windows(config, name)
    return TargetFeatures(
        windows=windows,
        layer_types=layer_types,
        max_positions=_positive_int(getattr(config, "max_position_embeddings", None)),
        attn_softcap=softcap,
        final_softcap=getattr(config, "final_logit_softcapping", None),
        logit_scale=_logit_scale(config),
        attention_backend=bool(getattr(type(model), "_supports_attention_backend", False)),
    )


def tree_op_refusal(model, features: TargetFeatures) -> str | None:
    """Why ``attention="tree_op"`` cannot run ``model`` exactly, or None (sliding windows are fine)."""
    name = type(model).__name__
    if not features.attention_backend:
        return (f"{name} does not route attention through transformers' attention registry with the forward's "
                "keyword arguments (_supports_attention_backend is False), so the tree op cannot reach its layers")
    if features.attn_softcap is not None:
        return f"{name} soft-caps attention logits (attn_logit_softcapping={features.attn_softcap}); the tree op cannot"
    return None


def _check_forward(base, name: str) -> None:
    params = inspect.signature(base.forward).parameters
    missing = [p for p in ("position_ids", "cache") if p not in params]
    if missing:
        raise ValueError(f"{name}'s base model forward takes no {' / '.join(missing)}: tree verification needs "
                         "explicit position ids and a DynamicCache")


def _check_causal(config, name: str) -> None:
    if getattr(config, "is_causal", True) is False or getattr(config, "use_bidirectional_attention", False):
        raise ValueError(f"{name} is configured for bidirectional attention: speculative decoding needs causal "
                         "attention")


def _layer_windows(config, name: str) -> tuple[tuple[int | None, ...], tuple[str, ...] | None]:
    """Per-layer windows from ``config.layer_types`` (hybrid models) or ``config.sliding_window``
    (a window on every layer, as Mistral and Phi-3 apply it)."""
    n = int(config.num_hidden_layers)
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is None:
        if window is not None and getattr(config, "use_sliding_window", True):
            return (_window(window, name),) * n, None
        return (None,) * n, None
    types = tuple(types)
    unknown = sorted(set(types) - {FULL, SLIDING})
    if unknown:
        raise ValueError(f"{name} has layers of type {unknown} (config.layer_types): HFTarget masks only "
                         f"{FULL!r} and {SLIDING!r} layers, whose caches keep one row per token")
    if len(types) != n:
        raise ValueError(f"{name}: config.layer_types names {len(types)} layers, num_hidden_layers is {n}")
    sliding = _window(window, name) if SLIDING in types else None
    return tuple(sliding if t == SLIDING else None for t in types), types


def _window(window, name: str) -> int:
    value = _positive_int(window)
    if value is None:
        raise ValueError(f"{name} has sliding-window layers but config.sliding_window={window!r} is not an int >= 1")
    return value


def _positive_int(value) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def _logit_scale(config) -> float:
    scale = 1.0
    if getattr(config, "logits_scaling", None):
        scale /= float(config.logits_scaling)
    if getattr(config, "logit_scale", None):
        scale *= float(config.logit_scale)
    return scale
