"""The fleet product: should this traffic speculate, and how, at production concurrency.

A fleet model (:mod:`.workload`, :mod:`.simulator` of continuous batching, :mod:`.memory`,
:mod:`.goodput`, :mod:`.sweep` over load) and the plan/review product built on it
(:mod:`.policies`, :mod:`.pools`, :mod:`.planner`, :mod:`.report`, :mod:`.review`; see
docs/deciding.md), and :mod:`.vllm`, the same product for a running vLLM deployment measured from
outside (see docs/deploying.md).
"""
