"""The statistical exactness suites, importable for anyone's sampler or decoder: the sampler suite
(:mod:`.suite`, :mod:`.laws`, :mod:`.mutants`, :mod:`.report`) and the end-to-end decoder law test
(:mod:`.decoder_law`, :mod:`.targets`, :mod:`.engine_mutants`; the latter imports the verify engine and
is not loaded by ``import specdec.conformance``).
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
