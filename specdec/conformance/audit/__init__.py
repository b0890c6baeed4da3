"""``specdec.conformance.audit``: test any engine's speculative decoding for an unchanged output law.

Speculative decoding's one promise is that it does not change what the model says. An audit
checks an engine, a speculative method and the sampling settings its users run against that
promise, with stated power:

* the exact law of the first ``L`` tokens is enumerated from the checkpoint the engine serves, with
  the engine's documented processing order (:mod:`.law`, :mod:`.processing`), on a tiny target
  whose law depends on the whole context and prompts on which drafts land (:mod:`.fixtures`);
* per setting (:mod:`.settings`), the engine samples with and without speculation (independent
  seeds); each arm is G-tested against the exact law and the arms against each other (:mod:`.stats`,
  on :mod:`specdec.conformance.suite`'s statistic); a perturbation arm states the smallest total
  variation the case could see;
* each case is *exact*, *biased*, *refused* (the engine's message), *error* or *inconclusive*
  (:mod:`.verdict`; never a pass); greedy runs are compared token for token (:mod:`.greedy`);
* the report is Markdown and JSON, with a standalone reproducer per finding (:mod:`.report`,
  :mod:`.reproducer`).

Engines (:mod:`.adapters`): specdec's decoder, Hugging Face, vLLM (in-process or a server),
llama.cpp, and any other through :class:`CallableEngine`. :mod:`.honest_engine` and :mod:`.broken_engines` are
an honest engine and broken ones the audit must flag. ``specdec audit`` is the command line.
"""

from .engine import CallableEngine, Engine, EngineFailed, Job, Refused, Samples, check_independent, request_seed
from .greedy import GreedyResult, check_greedy
from .law import LogitTables, exact_law, logit_table
from .processing import PROFILES, Profile
from .runner import AuditConfig, AuditReport, CaseResult, audit
from .settings import QUICK, SETTINGS, Mixed, Sampling, select
from .verdict import VERDICTS, Verdict

__all__ = ["PROFILES", "QUICK", "SETTINGS", "VERDICTS", "AuditConfig", "AuditReport", "CallableEngine", "CaseResult",
           "Engine", "EngineFailed", "GreedyResult", "Job", "LogitTables", "Mixed", "Profile", "Refused", "Sampling",
           "Samples", "Verdict", "audit", "check_greedy", "check_independent", "exact_law", "logit_table",
           "request_seed", "select"]
