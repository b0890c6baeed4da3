"""``specdec.conformance.audit``: test any engine's speculative decoding for an unchanged output law.

Per case (engine, method, setting): the exact law (:mod:`.law`, :mod:`.processing`) on a tiny target
(:mod:`.fixtures`), both arms G-tested with stated power (:mod:`.stats`, :mod:`.runner`), a verdict
(:mod:`.verdict`), a report and reproducers (:mod:`.report`, :mod:`.reproducer`). Engines: :mod:`.adapters`,
:class:`CallableEngine`. ``specdec audit`` is the command line; docs/audit.md the method.
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
