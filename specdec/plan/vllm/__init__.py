"""Planning a vLLM deployment from outside: ``specdec plan --engine vllm`` and ``specdec review --engine vllm``.

One server per candidate configuration (launched from the user's command, or running at a URL);
step times from the token stream, acceptance from ``/metrics``, the drafter's memory from the KV
blocks the engine reports; per pool a decision, a ready ``speculative_config`` and a review
record. One module per job:

* :mod:`.pools`: the pool file (objectives, traffic share, rates, prompts, sampling), checked
  before any server starts;
* :mod:`.candidates`: ``METHOD[:K]`` names and the ``speculative_config`` each is;
* :mod:`.launcher`: servers from the user's command, vLLM's reason when it refuses one;
* :mod:`.stream`: the SSE client (every chunk's time and tokens); :mod:`.metrics`: ``/metrics``;
* :mod:`.measure`: one candidate on one pool; :mod:`.calibrate`: a run into step costs and
  acceptance; :mod:`.schedule`: ``num_speculative_tokens_per_batch_size`` from the measured gain;
  :mod:`.memory`: KV blocks and admitted concurrency;
* :mod:`.predict`: goodput against load with its band; :mod:`.decide`: the per-pool decision;
* :mod:`.plan`: the whole plan; :mod:`.report`: what it writes; :mod:`.record` / :mod:`.review`:
  the review record and the keep / re-plan / turn-off review.

The guide is docs/deploying.md.
"""

from .candidates import Candidate, parse_candidates
from .decide import Thresholds
from .launcher import ServeCommand
from .run_plan import PlanSettings, ServerSource, plan_vllm
from .pool_spec import load_pool_file, parse_pool_file
from .predict import Engine
from .summary import write as write_report
from .recheck import review_vllm, write_review

__all__ = ["Candidate", "Engine", "PlanSettings", "ServeCommand", "ServerSource", "Thresholds", "load_pool_file",
           "parse_candidates", "parse_pool_file", "plan_vllm", "review_vllm", "write_report", "write_review"]
