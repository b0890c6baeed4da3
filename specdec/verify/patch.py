"""ForwardPatch: the one change specdec makes to a caller's model, and only while specdec's own forwards run.

Two substitutions, each computing the same function as the model's own code, faster:

* **linears** -- every plain float32 CPU ``nn.Linear`` under the given root runs
  :func:`specdec.ops.skinny_linear.linear_rows` (an instance-level ``forward``, deleted on exit): a
  verify step's few rows cost what one row costs (``benchmarks/kernels/skinny_linear.py``). With
  ``half_weights`` the kernel reads a float16 copy of each weight that float16 holds exactly (a
  draft layer stored in fp16): bitwise the same products from half the bytes.
* **attention** -- a model configured for ``"sdpa"`` (and, in tree mode, any model) runs
  :func:`specdec.ops.hf_attention.tree_attention_forward`: SDPA over grouped K/V without
  transformers' copy of every K/V head when a mask comes with several query rows, and the
  tree-attention op when the forward passes tree kwargs (``benchmarks/kernels/verify_attention.py``).

On exit, exceptions included, the model is exactly as the caller gave it: no attribute, forward or
attention setting of specdec survives the ``with`` block.

Several decoders may share one model and run in several threads at once (each with its own
decoder, target and proposer). Their patches then share one state, kept on the model only while
at least one of them is inside: the first to enter applies the substitutions, the last to leave
restores the model, and an entrant that needs tree attention switches it on for the rest too
(the same function for them: without tree kwargs it is grouped SDPA). One ``ForwardPatch`` instance
serves one thread at a time: entering it from a second thread while the first is inside raises
``RuntimeError`` (one decoder per thread), and entering it twice in one thread is a bug
(``RuntimeError``, not re-entrant).
"""

from __future__ import annotations

import threading

import torch
from torch import nn

from ..ops.hf_attention import ATTENTION_NAME, register
from ..ops.skinny_linear import eligible_linear, exact_half, linear_rows, op_available

_STATE = "_specdec_forward_patch"  # the model attribute that exists only while a patch is inside


def own_attention(model) -> str | None:
    """The attention implementation the caller configured on ``model``, also while a specdec forward
    in another thread has it switched (the configuration then names specdec's function)."""
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
        model: the module whose forwards run inside the block (a transformers model for the
            attention substitution; any module for the linears alone).
        linears: the module whose ``nn.Linear`` layers are routed through the skinny kernel, or
            None (default: none). HFTarget passes the base model: it computes the LM head itself.
        attention: switch an SDPA model to specdec's attention function (default True); False
            leaves attention alone (a drafter that only wants its linears routed).
        tree_attention: also switch models not configured for SDPA (needed when forwards pass tree
            kwargs).
        half_weights: keep a float16 copy of every routed weight that float16 holds exactly and let
            the kernel read it (default False: the copies cost half the weights' memory again, see
            :attr:`extra_bytes`). A copy is remade when its weight was changed in place since.
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
        """The exact float16 copy of ``m.weight`` (remade when the weight was replaced or changed in
        place since), or None."""
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
