"""Compiled-op front ends with their plain-torch references (see each module's docstring)."""

from .tree_attention import tree_attention, tree_attention_reference, validate_tree_mask

__all__ = ["tree_attention", "tree_attention_reference", "validate_tree_mask"]
