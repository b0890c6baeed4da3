"""Target adapters: run a target model over draft trees and keep its KV cache consistent."""

from .hf import BatchState, HFTarget, VerifyOutput

__all__ = ["BatchState", "HFTarget", "VerifyOutput"]
