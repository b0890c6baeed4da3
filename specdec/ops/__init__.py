"""Compiled-op front ends with their plain-torch references (see each module's docstring)."""

from . import fakes  # noqa: F401  (registers the ops' fake implementations for torch.compile)
from .skinny_linear import skinny_linear, skinny_linear_reference
from .tree_attention import tree_attention, tree_attention_reference, validate_tree_mask

__all__ = ["skinny_linear", "skinny_linear_reference", "tree_attention", "tree_attention_reference",
           "validate_tree_mask"]
