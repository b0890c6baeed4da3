"""A ``custom_class`` proposer that never drafts and does no work: what vLLM's speculative path costs by itself.

It is the baseline that separates specdec's drafter from the engine's side of the interface in
``step_tax.py``: with this class loaded vLLM still runs its speculative path (lookahead slots,
``propose`` after every step, the engine core's ``take_draft_token_ids`` call to the worker; on
GPUs no async scheduling), but the call returns at once. Loaded by dotted path
(``benchmarks.vllm.null_drafter.NullDrafter``) with the checkout's root on the server's ``PYTHONPATH``.
"""

from __future__ import annotations


class NullDrafter:
    def __init__(self, vllm_config):
        del vllm_config

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec, token_ids_cpu,
                slot_mappings=None) -> list[list[int]]:
        """No draft for any row: one empty chain per row, as specdec's drafter returns when its gate is off."""
        del num_tokens_no_spec, token_ids_cpu, slot_mappings
        return [[] for _ in sampled_token_ids]

    def load_model(self, target_model) -> None:
        """vLLM's CPU runner calls this on every drafter; nothing to load."""
        del target_model
