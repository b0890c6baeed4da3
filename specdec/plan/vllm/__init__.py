"""Planning a vLLM deployment from outside: ``specdec plan --engine vllm`` and ``specdec review --engine vllm``.

One server per candidate configuration; step times from the token stream, acceptance from
``/metrics``, the drafter's memory from the KV blocks the engine reports; per pool a decision, a
ready ``speculative_config`` and a review record. One module per job: :mod:`.pool_spec` (the pool
file), :mod:`.candidates`, :mod:`.launcher`, :mod:`.stream` (the SSE client),
:mod:`.server_metrics`, :mod:`.measure`, :mod:`.engine_trace` and :mod:`.calibrate` (a run into
simulator inputs), :mod:`.schedule`, :mod:`.kv_budget`, :mod:`.predict`, :mod:`.decide`,
:mod:`.run_plan`, :mod:`.recorded` (a plan made again from its record), :mod:`.summary`, :mod:`.record`
and :mod:`.recheck`. The guide is docs/deploying.md.
"""

from .candidates import Candidate, parse_candidates
from .decide import Thresholds
from .launcher import ServeCommand
from .run_plan import PlanSettings, ServerSource, plan_vllm
from .pool_spec import load_pool_file, parse_pool_file
from .engine_trace import Engine
from .summary import write as write_report
from .recheck import review_vllm, write_review

__all__ = ["Candidate", "Engine", "PlanSettings", "ServeCommand", "ServerSource", "Thresholds", "load_pool_file",
           "parse_candidates", "parse_pool_file", "plan_vllm", "review_vllm", "write_report", "write_review"]
