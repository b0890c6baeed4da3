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
    ("specdec.decoding", "ScoreCalibration", "specdec.calibration"),
    ("specdec.cost_model", "VerifyCostModel", "specdec.engine.verify_cost"),
    ("specdec.cost_model", "RequestCalibration", "specdec.calibration"),
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
    from specdec.proposers import (DraftModelProposer, EagleProposer, HybridProposer, MedusaProposer,  # noqa: F401
                                   Proposer, ReplayProposer, ScoredProposer, SuffixProposer)
    import specdec.proposers as p

    assert set(p.__all__) <= set(dir(p))

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


# Which specdec parts each part may import (the data flow of docs/architecture.md). A part is a
# top-level module or package of specdec; "" is the package's own __init__ (it re-exports).
# Lower layers never reach up: nothing below the engine imports it, and no library layer imports
# the command line.
LOW = {"checks", "tree", "calibration", "_ext", "_compat", "_lazy", "_requires"}
ALLOWED = {
    "checks": set(),
    "calibration": set(),
    "tree": {"checks"},
    "ops": {"checks", "tree", "_ext"},
    "verify": {"checks", "tree", "ops", "_ext", "_requires"},
    "sampling": {"checks", "tree"},
    "artifacts": {"proposers"},  # the Artifact protocol lives beside the proposers that implement it
    "prompts": set(),
    "proposers": LOW | {"ops", "verify", "sampling", "artifacts", "prompts"},
    "engine": LOW | {"ops", "verify", "sampling", "proposers"},
    "conformance": LOW | {"verify", "sampling", "engine", "proposers"},
    "models": LOW | {"verify", "prompts"},
    "training": LOW | {"verify", "proposers", "artifacts", "models", "prompts"},
    "bench": LOW | {"engine", "models", "prompts"},
    "integrations": LOW | {"verify", "sampling", "proposers", "artifacts", "serving", "engine"},
    "serving": LOW
    | {"verify", "sampling", "proposers", "engine", "training", "artifacts", "models", "prompts", "bench"},
}
# one-release shims of moved modules (each only re-exports through _compat.moved)
SHIMS = {"serving/commands.py", "training/commands.py"}


def _specdec_imports(path, root):
    """The specdec parts a source file imports (absolute or relative, at any depth of the file)."""
    import ast

    rel = path.relative_to(root.parent).with_suffix("")
    here = list(rel.parts[:-1])  # the package a relative import starts from
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                if node.module:
                    names.append(".".join(base + [node.module]))
                else:
                    names += [".".join(base + [a.name]) for a in node.names]
            elif node.module:
                names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "specdec" and len(parts) > 1:
                yield parts[1]


def test_each_layer_imports_only_the_layers_below_it():
    from pathlib import Path

    root = Path(specdec.__file__).parent
    bad = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        part = rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.name != "__init__.py" else ""
        if part not in ALLOWED or str(rel) in SHIMS:
            continue  # the package __init__, the command line, and the one-release shims may import anything
        for used in set(_specdec_imports(path, root)) - {part}:
            if used not in ALLOWED[part]:
                bad.append(f"{rel} imports specdec.{used}")
    assert not bad, "layering broken (see docs/architecture.md):\n" + "\n".join(bad)


def test_the_layering_check_sees_a_violation(tmp_path):
    """The check above must be able to fail: a file in a low layer that reaches up is reported."""
    pkg = tmp_path / "specdec"
    (pkg / "sampling").mkdir(parents=True)
    f = pkg / "sampling" / "x.py"
    f.write_text("from ..engine.sizing import DraftSizer\nimport specdec.cli\n")
    assert set(_specdec_imports(f, pkg)) == {"engine", "cli"}
