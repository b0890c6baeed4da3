"""specdec inside serving engines, through each engine's public extension points only: :mod:`.rows`
(engine-agnostic request identity from batch rows), :mod:`.hf` (``model.generate(custom_generate=...)``,
docs/huggingface.md) and :mod:`.vllm` (a ``custom_class`` drafter, docs/vllm.md)."""
