"""specdec as a vLLM ``custom_class`` drafter (docs/vllm.md): ``speculative_config={"method":
"custom_class", "model": "specdec.integrations.vllm.drafter.SuffixDrafter", "num_speculative_tokens":
4}``; options in ``SPECDEC_VLLM_OPTIONS`` (:class:`~.options.DrafterOptions`). Imports nothing from vLLM."""
