"""The statistical exactness suites, importable for anyone's sampler or decoder.

* :mod:`~specdec.conformance.suite` -- cases, the lockstep Monte-Carlo loop, G tests, the report;
* :mod:`~specdec.conformance.laws` -- small exact target/draft models and the exact output law;
* :mod:`~specdec.conformance.mutants` -- deliberately broken samplers the suite must reject;
* :mod:`~specdec.conformance.report` -- ``python -m specdec.conformance.report``: the power table;
* :mod:`~specdec.conformance.decoder_law` -- the end-to-end law test of a whole decoder over a real
  Hugging Face target;
* :mod:`~specdec.conformance.targets` -- tiny targets whose law depends on the whole context;
* :mod:`~specdec.conformance.engine_mutants` -- deliberately broken decoders (KV compaction,
  positions, sampler inputs) the end-to-end test must reject (imports the verify engine: not
  loaded by ``import specdec.conformance``).
"""

from .decoder_law import (WINDOWS, DecoderCase, DecoderStats, check_decoder, exact_decoder_law, run_decoder_suite,
                          sample_decoder)
from .laws import DraftSpec, Model, PrefixTable, ProcessedModel, TableModel, exact_law
from .suite import (FAMILY_ALPHA, MIN_EXPECTED, BatchSamplerFn, Case, DraftBatch, GTestResult, SuiteReport,
                    batch_sampler, check_case, default_cases, g_test, padded_sampler, prefix_law_tests, run_suite,
                    simulate, single_sampler, window_law_tests)
from .targets import ContextDependence, context_dependence, context_target, noisy_copy

__all__ = ["FAMILY_ALPHA", "MIN_EXPECTED", "WINDOWS", "BatchSamplerFn", "Case", "ContextDependence", "DecoderCase",
           "DecoderStats", "DraftBatch", "DraftSpec", "GTestResult", "Model", "PrefixTable", "ProcessedModel",
           "SuiteReport", "TableModel", "batch_sampler", "check_case", "check_decoder", "context_dependence",
           "context_target", "default_cases", "exact_decoder_law", "exact_law", "g_test", "noisy_copy",
           "padded_sampler", "prefix_law_tests", "run_decoder_suite", "run_suite", "sample_decoder", "simulate",
           "single_sampler", "window_law_tests"]
