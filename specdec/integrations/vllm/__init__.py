"""specdec as a vLLM ``custom_class`` drafter (docs/vllm.md).

Enable with one config line::

    speculative_config={"method": "custom_class",
                        "model": "specdec.integrations.vllm.drafter.SuffixDrafter",
                        "num_speculative_tokens": 4}

Options (load gate, global cache, ...) come from the ``SPECDEC_VLLM_OPTIONS`` environment variable
(JSON), which vLLM's engine processes inherit: see :class:`~specdec.integrations.vllm.options.DrafterOptions`.
Importing this package imports nothing from vLLM.
"""
