"""A reduced drafting vocabulary (FR-Spec): the token ids a trained drafter scores, and their rows
of the target's LM head. Shared by the Medusa heads and the EAGLE-style layer.

Drafting over ``R << V`` frequent tokens narrows what is drafted, never what is verified, so it
cannot change the output; ids outside ``[0, V)`` would silently index other rows, hence the checks.
"""

from __future__ import annotations

import torch

from ..ops.skinny_linear import exact_half, linear_rows, op_available


def check_vocab_ids(vocab_ids) -> torch.Tensor | None:
    """``LongTensor[R]`` of distinct ids (or None for the full vocabulary); ValueError otherwise."""
    if vocab_ids is None:
        return None
    vocab_ids = torch.as_tensor(vocab_ids, dtype=torch.long)
    if vocab_ids.dim() != 1 or vocab_ids.numel() == 0 or vocab_ids.unique().numel() != vocab_ids.numel():
        raise ValueError("vocab_ids must be a non-empty 1-D tensor of distinct token ids")
    if int(vocab_ids.min()) < 0:
        raise ValueError(f"vocab_ids must be >= 0, got {int(vocab_ids.min())}")
    return vocab_ids


def lm_rows(lm_weight: torch.Tensor, vocab_ids: torch.Tensor | None) -> torch.Tensor:
    """The LM-head rows drafted: ``[R, H]`` (reduced) or ``lm_weight`` itself ``[V, H]``."""
    if vocab_ids is None:
        return lm_weight
    if int(vocab_ids.max()) >= lm_weight.shape[0]:
        raise ValueError(f"vocab_ids reach id {int(vocab_ids.max())} but the LM head has {lm_weight.shape[0]} rows")
    return lm_weight[vocab_ids.to(lm_weight.device)]


#: How a drafter holds its gathered LM-head rows: ``"float16"`` rounds them, ``"float32"`` keeps them
#: as gathered (whatever the target's dtype), ``None`` rounds where the compiled CPU kernel reads the
#: float16 copy (reduced float32 rows on the CPU) and keeps them elsewhere.
HEAD_DTYPES = (None, "float16", "float32")


class HeadDtypeError(ValueError):
    """A ``head_dtype`` the drafter cannot apply (raised before any weight is read)."""


class DraftHead:
    """The LM-head rows a drafter scores with, and the copy the skinny kernel reads.

    ``"float16"`` rounds the gathered rows to float16 once (CPU drafting is bound by bytes read),
    held in float32 for ``F.linear`` and as an exact float16 copy for the kernel, so every path scores
    alike; drafts move by the rounding, outputs do not. ``"float32"`` keeps the rows as gathered. The
    default rounds only where the kernel reads the copy; a full-vocabulary head (the target's own
    tensor) is never rounded.

    Args:
        lm_weight: the target's LM-head weight ``[V, H]``.
        vocab_ids: the drafting vocabulary ``LongTensor[R]``, or None for all ``V`` ids.
        head_dtype: one of :data:`HEAD_DTYPES`.

    Raises:
        HeadDtypeError: an unknown ``head_dtype``, ``"float16"`` with a full vocabulary or a
            non-float32 head, or ``"float32"`` with a non-float32 head.
    """

    def __init__(self, lm_weight: torch.Tensor, vocab_ids: torch.Tensor | None, head_dtype: str | None = None):
        check_head_dtype(head_dtype)
        rows = lm_rows(lm_weight, vocab_ids)
        reducible = vocab_ids is not None and rows.dtype == torch.float32
        if head_dtype == "float16" and not reducible:
            what = "the full vocabulary, the target's own tensor" if vocab_ids is None else f"{rows.dtype} rows"
            raise HeadDtypeError("head_dtype='float16' rounds the gathered rows of a reduced float32 drafting "
                                 f"vocabulary, but this drafter scores with {what}")
        if head_dtype == "float32" and rows.dtype != torch.float32:
            # Upcast rows could not score the target's own-dtype features; keeping them would make the
            # name a lie. None keeps the target's dtype.
            raise HeadDtypeError(f"head_dtype='float32' holds float32 rows, but this target's LM head is "
                                 f"{rows.dtype}; pass head_dtype=None to score in the target's own dtype")
        if head_dtype == "float16" or (head_dtype is None and reducible and rows.device.type == "cpu"
                                       and op_available()):
            rows = rows.detach().to(torch.float16).float()
            self.dtype = "float16"
        else:
            self.dtype = "float32" if rows.dtype == torch.float32 else str(rows.dtype).removeprefix("torch.")
        self.rows = rows.contiguous()  # [R, H]
        # [R, H] float16, or None (a full head; no compiled kernel to read it; rows float16 would round)
        self.kernel = exact_half(self.rows) if vocab_ids is not None and op_available() else None
        self.owned = vocab_ids is not None  # gathered rows are the drafter's memory; the full head is the target's

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., H]`` -> drafting-vocabulary logits ``[..., R]`` (skinny kernel for few CPU rows)."""
        return linear_rows(x, self.rows, None, kernel_weight=self.kernel)

    @property
    def nbytes(self) -> int:
        """Bytes the drafter holds for its gathered rows and their float16 copy, if any (0 for the full head)."""
        if not self.owned:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.rows, self.kernel) if t is not None)


def check_head_dtype(head_dtype) -> None:
    """Raise :class:`HeadDtypeError` unless ``head_dtype`` is one of :data:`HEAD_DTYPES`."""
    if head_dtype not in HEAD_DTYPES:
        raise HeadDtypeError(f"head_dtype must be one of {HEAD_DTYPES}, got {head_dtype!r}")
