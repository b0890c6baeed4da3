"""specdec as a vLLM ``custom_class`` drafter (docs/vllm.md): ``speculative_config={"method":
"custom_class", "model": "specdec.integrations.vllm.drafter.SuffixDrafter", "num_speculative_tokens":
4}``; options in ``SPECDEC_VLLM_OPTIONS`` (:class:`~.options.DrafterOptions`). Imports nothing from vLLM."""

LOGGER_NAME = "vllm.specdec"
"""The drafter's logger: under vLLM's, so ``vllm serve`` prints its lines with vLLM's format and level
(``VLLM_LOGGING_LEVEL``); a logger of its own would reach no handler there."""
