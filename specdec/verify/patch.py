"""ForwardPatch: the one change specdec makes to a caller's model, and only while specdec's own forwards run.

Two substitutions computing the model's own function, faster: float32 CPU ``nn.Linear`` layers run
:func:`specdec.ops.skinny_linear.linear_rows` (an instance ``forward``; with ``half_weights``, from
exact float16 copies: the same products from half the bytes), and SDPA models (any model in tree mode)
run :func:`specdec.ops.hf_attention.tree_attention_forward`. On exit, exceptions included, the model
is exactly as given. Patches of decoders sharing a model across threads share one state: the first in
applies, the last out restores, and tree attention once switched on serves the rest too (grouped
SDPA without tree kwargs). One instance per thread: a second thread or re-entry raises ``RuntimeError``.
"""

from __future__ import annotations

import threading

import torch
from torch import nn

from ..ops.hf_attention import ATTENTION_NAME, register
from ..ops.skinny_linear import eligible_linear, exact_half, linear_rows, op_available

_STATE = "_specdec_forward_patch"  # the model attribute that exists only while a patch is inside


def own_attention(model) -> str | None:
    """The caller's attention implementation on ``model``, also while another thread has it switched."""
    config = getattr(model, "config", None)
    for _ in range(2):  # a patch may appear between the two reads: look once more
        shared = model.__dict__.get(_STATE)
        if shared is None:
            attn = getattr(config, "_attn_implementation", None)
            if attn != ATTENTION_NAME or _STATE not in model.__dict__:
                return attn
            continue
        with shared.lock:
            if not shared.dead:
                return shared.saved_attention if shared.switched else getattr(config, "_attn_implementation", None)
    return getattr(config, "_attn_implementation", None)


class _Shared:
    """The patch state of one model, shared by every ForwardPatch inside it (guarded by ``lock``)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inside = 0
        self.dead = False  # set by the last one out; an entrant holding a dead state retries
        self.switched = False  # the model's attention setting is specdec's now
        self.saved_attention: str | None = None  # the model's own setting while switched
        self.linears: list[nn.Linear] = []


class ForwardPatch:
    """Context manager applying the substitutions above to ``model`` for the duration of a ``with``.

    Args:
        model: the module whose forwards run inside the block (transformers model for attention).
        linears: the module whose ``nn.Linear`` layers use the skinny kernel, or None.
        attention: switch an SDPA model to specdec's attention function; ``tree_attention``: switch
            any model (needed when forwards pass tree kwargs).
        half_weights: let the kernel read exact float16 copies (half the weights' memory again,
            :attr:`extra_bytes`; remade after in-place changes).
    """

    def __init__(self, model: nn.Module, *, linears: nn.Module | None = None, attention: bool = True,
                 tree_attention: bool = False, half_weights: bool = False):
        self.model = model
        self.config = getattr(model, "config", None) if attention or tree_attention else None
        self.tree_attention = bool(tree_attention)
        self._linears = ([m for m in linears.modules() if eligible_linear(m)]
                         if linears is not None and op_available() else [])
        self.half_weights = bool(half_weights)
        # id(module) -> (the weight copied, its version then, the copy or None)
        self._halves: dict[int, tuple[torch.Tensor, int, torch.Tensor | None]] = {}
        for m in self._linears:  # made now, so memory accounting sees them before the first forward
            self._kernel_weight(m)
        if self.config is not None:
            register()  # idempotent: transformers' registries are keyed by name
        self._owner: int | None = None  # thread inside this instance now
        self._guard = threading.Lock()
        self._shared: _Shared | None = None

    @property
    def modules(self) -> list[nn.Linear]:
        """The linear layers this patch routes through the skinny kernel."""
        return list(self._linears)

    @property
    def extra_bytes(self) -> int:
        """Memory of the float16 weight copies (0 without ``half_weights``)."""
        return sum(h.numel() * h.element_size() for _, _, h in self._halves.values() if h is not None)

    def _kernel_weight(self, m: nn.Linear) -> torch.Tensor | None:
        """The exact float16 copy of ``m.weight`` (remade after a change), or None."""
        if not self.half_weights:
            return None
        w = m.weight
        cached = self._halves.get(id(m))
        if cached is None or cached[0] is not w or cached[1] != w._version:
            cached = (w, w._version, exact_half(w))
            self._halves[id(m)] = cached
        return cached[2]

    def _own_attention(self) -> str | None:
        return getattr(self.config, "_attn_implementation", None)

    def __enter__(self) -> "ForwardPatch":
        me = threading.get_ident()
        with self._guard:
            if self._owner is not None:
                raise RuntimeError("this specdec forward patch is already in use "
                                   + ("in this thread (not re-entrant)" if self._owner == me else
                                      "by another thread: use one decoder (and one HFTarget) per thread; "
                                      "decoders may share one model"))
            self._owner = me
        try:
            self._shared = self._join()
        except BaseException:
            self._owner = None
            raise
        return self

    def __exit__(self, *exc) -> None:
        shared, self._shared = self._shared, None
        try:
            with shared.lock:
                shared.inside -= 1
                if shared.inside == 0:
                    self._restore(shared)
        finally:
            self._owner = None

    def _join(self) -> _Shared:
        """Enter the model's shared state (creating it as the first one in), applying what is missing."""
        while True:
            shared = self.model.__dict__.setdefault(_STATE, _Shared())  # atomic: one state per model
            with shared.lock:
                if shared.dead:  # the last one out just restored the model: start a new state
                    continue
                shared.inside += 1
                if shared.inside == 1:
                    self._apply_linears(shared)
                self._apply_attention(shared)
                return shared

    def _apply_linears(self, shared: _Shared) -> None:
        # A module whose forward is already replaced on the instance (accelerate's device hooks,
        # another wrapper) is left alone: its wrapper may move tensors or do more than the product.
        shared.linears = [m for m in self._linears if "forward" not in m.__dict__]
        for m in shared.linears:
            m.forward = _bound_forward(m, self._kernel_weight(m))

    def _apply_attention(self, shared: _Shared) -> None:
        if self.config is None or shared.switched:
            return
        own = self._own_attention()
        if self.tree_attention or own == "sdpa":
            shared.saved_attention, shared.switched = own, True
            self.config._attn_implementation = ATTENTION_NAME

    def _restore(self, shared: _Shared) -> None:
        for m in shared.linears:
            m.__dict__.pop("forward", None)
        if shared.switched:
            self.config._attn_implementation = shared.saved_attention
        shared.dead = True
        self.model.__dict__.pop(_STATE, None)


def _bound_forward(module: nn.Linear, kernel_weight: torch.Tensor | None):
    weight, bias = module.weight, module.bias

    def forward(x):
        return linear_rows(x, weight, bias, kernel_weight=kernel_weight)

    return forward
