"""specdec inside serving engines, through each engine's public extension points only.

* :mod:`specdec.integrations.rows`: request identity and drafting for engines that pass batch rows
  (a token matrix and committed lengths) instead of request ids; engine-agnostic.
* :mod:`specdec.integrations.hf`: ``model.generate(..., custom_generate=specdec.integrations.hf.generate)``,
  Hugging Face's own extension point for decoding loops (docs/huggingface.md);
* :mod:`specdec.integrations.vllm`: a vLLM ``custom_class`` drafter with specdec's suffix proposer
  and load gate inside (docs/vllm.md).
"""
