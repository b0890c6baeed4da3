"""The package layout's promises: every public name where the docs say, old paths for one release."""

import importlib
import subprocess
import sys
import warnings

import pytest

import specdec

# old module path -> a name that must still resolve there, and the module it now lives in
OLD_PATHS = [
    ("specdec.decoding", "SpeculativeDecoder", "specdec.engine.decoder"),
    ("specdec.decoding", "ScoreCalibration", "specdec.engine.sizing"),
    ("specdec.cost_model", "VerifyCostModel", "specdec.engine.verify_cost"),
    ("specdec.cost_model", "RequestCalibration", "specdec.engine.sizing"),
    ("specdec.metrics", "RequestMetrics", "specdec.engine.metrics"),
    ("specdec.logits", "SamplingParams", "specdec.sampling.params"),
    ("specdec.logits", "check_distributions", "specdec.checks"),
    ("specdec.sampling_core", "TreeSpeculative", "specdec.sampling.kernels"),
    ("specdec.sampling_reference", "reference_rejection_sample", "specdec.sampling.reference"),
    ("specdec.tree_batch", "pack_trees", "specdec.tree"),
    ("specdec.suffix", "SuffixAutomaton", "specdec.proposers.suffix_automaton"),
    ("specdec.target", "HFTarget", "specdec.verify.hf"),
    ("specdec.target.hf", "BatchState", "specdec.verify.hf"),
    ("specdec.generation", "clean_generate", "specdec.models"),
    ("specdec.jsonl", "read_jsonl", "specdec.prompts"),
    ("specdec.conformance_models", "exact_law", "specdec.conformance.models"),
    ("specdec.conformance_mutants", "MUTANTS", "specdec.conformance.mutants"),
    ("specdec.proposers.base", "as_token_list", "specdec.checks"),
    ("specdec.proposers.base", "ReplayProposer", "specdec.proposers.replay"),
    ("specdec.commands.common", "make_proposer", "specdec.cli.common"),
    ("specdec.serving.commands", "run_plan", "specdec.cli.plan"),
    ("specdec.training.commands", "load_target", "specdec.models"),  # the one loader since issue 14
    ("specdec.check", "check", "specdec.cli.check"),
]


@pytest.mark.parametrize("old, name, new", OLD_PATHS)
def test_old_import_paths_still_resolve_with_a_deprecation_warning(old, name, new):
    module = importlib.import_module(old)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught), caught


def test_an_unknown_name_on_an_old_path_says_where_the_module_went():
    with pytest.raises(AttributeError, match="specdec.engine.decoder"):
        importlib.import_module("specdec.decoding").no_such_name  # noqa: B018


def test_every_proposer_is_importable_from_the_proposers_package():
    from specdec.proposers import (DraftModelProposer, EagleProposer, MedusaProposer, Proposer,  # noqa: F401
                                   ReplayProposer, ScoredProposer, SuffixProposer)

    assert isinstance(SuffixProposer(16), ScoredProposer)
    assert not isinstance(ReplayProposer({}), ScoredProposer)
    assert isinstance(ReplayProposer({}), Proposer)


def test_public_names_resolve_from_the_top_level():
    for name in specdec.__all__:
        assert getattr(specdec, name) is not None, name


def test_importing_the_light_parts_loads_neither_the_extension_nor_transformers():
    code = ("import sys, specdec, specdec.proposers, specdec.sampling, specdec.engine, specdec.conformance; "
            "print(sorted(m for m in ('specdec._C', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
