"""Engine adapters of the audit, one module per engine (each imports its engine only when used).

* :mod:`.specdec_decoder` -- specdec's :class:`~specdec.engine.decoder.SpeculativeDecoder`;
* :mod:`.hf` -- Hugging Face ``generate`` (``assistant_model``, ``prompt_lookup_num_tokens``, and
  specdec's ``custom_generate`` integration when it is installed);
* :mod:`.vllm` (+ :mod:`.vllm_worker`) -- vLLM's in-process ``LLM``, one process per engine;
* :mod:`.vllm_server` -- a running vLLM OpenAI server, by URL;
* :mod:`.llamacpp` (+ :mod:`.llamacpp_worker`, :mod:`.gguf`) -- llama.cpp through llama-cpp-python;
* the documented callable adapter for any other engine is
  :class:`~specdec.conformance.audit.engine.CallableEngine`.
"""
