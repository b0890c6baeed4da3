"""Engine adapters of the audit, one module per engine (each imports its engine only when used).

:mod:`.specdec_decoder`, :mod:`.hf_engine`, :mod:`.vllm` (+ :mod:`.vllm_worker`), :mod:`.vllm_server`,
:mod:`.llamacpp` (+ :mod:`.llamacpp_worker`, :mod:`.gguf_export`); any other engine:
:class:`~specdec.conformance.audit.engine.CallableEngine`.
"""
