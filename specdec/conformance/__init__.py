"""The statistical exactness suite, importable for anyone's sampler.

* :mod:`~specdec.conformance.suite` -- cases, the lockstep Monte-Carlo loop, G tests, the report;
* :mod:`~specdec.conformance.models` -- small exact target/draft models and the exact output law;
* :mod:`~specdec.conformance.mutants` -- deliberately broken samplers the suite must reject;
* :mod:`~specdec.conformance.report` -- ``python -m specdec.conformance.report``: the power table.
"""

from .models import DraftSpec, Model, PrefixTable, ProcessedModel, TableModel, exact_law
from .suite import (FAMILY_ALPHA, MIN_EXPECTED, BatchSamplerFn, Case, DraftBatch, GTestResult, SuiteReport,
                    batch_sampler, check_case, default_cases, g_test, padded_sampler, run_suite, simulate,
                    single_sampler)

__all__ = ["FAMILY_ALPHA", "MIN_EXPECTED", "BatchSamplerFn", "Case", "DraftBatch", "DraftSpec", "GTestResult", "Model",
           "PrefixTable", "ProcessedModel", "SuiteReport", "TableModel", "batch_sampler", "check_case",
           "default_cases", "exact_law", "g_test", "padded_sampler", "run_suite", "simulate", "single_sampler"]
