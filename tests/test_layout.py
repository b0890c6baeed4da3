"""The package layout's promises: every public name where the docs say, data flowing one way."""

import importlib
import subprocess
import sys

import pytest

import specdec

# module paths removed in 0.3 (they were one-release shims of the 0.2 moves; CHANGELOG.md lists them)
REMOVED = ["specdec.decoding", "specdec.cost_model", "specdec.metrics", "specdec.logits", "specdec.sampling_core",
           "specdec.sampling_reference", "specdec.tree_batch", "specdec.suffix", "specdec.target", "specdec.generation",
           "specdec.jsonl", "specdec.conformance_models", "specdec.conformance_mutants", "specdec.conformance_report",
           "specdec.commands", "specdec.check", "specdec.serving.commands", "specdec.training.commands"]


@pytest.mark.parametrize("old", REMOVED)
def test_the_one_release_shims_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_version_is_the_release_that_removed_them():
    assert specdec.__version__ == "0.3.0"


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
LOW = {"checks", "tree", "_ext", "_imports"}
ALLOWED = {
    "checks": set(),
    "tree": {"checks"},
    "estimate": {"checks", "tree"},
    "control": {"checks", "tree", "estimate"},
    "ops": {"checks", "tree", "_ext"},
    "verify": {"checks", "tree", "ops", "_ext", "_imports"},
    "sampling": {"checks", "tree"},
    "artifacts": set(),
    "prompts": set(),
    "proposers": LOW | {"ops", "verify", "sampling", "artifacts", "prompts", "control", "estimate"},
    "engine": LOW | {"ops", "verify", "sampling", "proposers", "control", "estimate"},
    "conformance": LOW | {"verify", "sampling", "engine", "proposers"},
    "models": LOW | {"verify", "prompts"},
    "training": LOW | {"verify", "proposers", "artifacts", "models", "prompts"},
    "plan": LOW | {"estimate", "control", "prompts", "artifacts"},
    "measure": LOW | {"verify", "sampling", "proposers", "engine", "estimate", "control", "artifacts", "models",
                      "prompts", "training", "plan"},
    "integrations": LOW | {"verify", "sampling", "proposers", "engine", "control", "estimate", "artifacts"},
}


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
        if part not in ALLOWED:
            continue  # the package __init__ and the command line may import anything
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


def _module_graph(root):
    """Module -> the specdec modules it imports at module level (function-local imports load lazily)."""
    import ast

    graph = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        pkg = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        edges = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom):
                base = pkg[: len(pkg) - (node.level - 1)] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
                for a in node.names:
                    full = f"{mod}.{a.name}"
                    target = full if (root.parent / full.replace(".", "/")).with_suffix(".py").exists() else mod
                    if target.startswith("specdec"):
                        edges.add(target)
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name.startswith("specdec")}
        graph[name] = edges - {name}
    return graph


def test_no_import_cycles_between_modules():
    """A cycle makes import order matter and hides which module owns a concept (the train CLI's
    recipes once imported each other over a private helper)."""
    from pathlib import Path

    graph = _module_graph(Path(specdec.__file__).parent)
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_every_draft_controller_implements_the_one_interface():
    """docs/architecture.md: how much to draft is answered by one interface (specdec.control.interface)."""
    from specdec.control.batch_schedule import BatchSchedule
    from specdec.control.interface import Capped, DraftController, FixedBudget
    from specdec.control.cost_gate import CostGate
    from specdec.control.load_gate import LoadGate
    from specdec.control.model_gate import ModelGate
    from specdec.control.sizer import DraftSizer
    from specdec.plan.policies import AlwaysOn, Off, gated
    from specdec.plan.vllm.candidates import Candidate
    from specdec.plan.vllm.schedule import SchedulePolicy

    controllers = [FixedBudget(2), LoadGate(), CostGate(4), ModelGate(), DraftSizer(), Off(), AlwaysOn(3),
                   gated(8, 4), Capped(LoadGate(), CostGate(4)), BatchSchedule([(1, 4, 2), (5, 8, 0)], 2),
                   SchedulePolicy(Candidate("ngram:sched", "ngram", 4, schedule=((1, 4, 4), (5, 8, 0))))]
    for c in controllers:
        assert isinstance(c, DraftController), type(c).__name__
        assert c.unit in ("tokens", "nodes")


def test_the_tests_mirror_the_package():
    """tests/<part>/ holds the tests of specdec/<part>/ (top-level modules' tests sit in tests/); the
    other folders are data, the fuzzer, the vLLM engine stage, scripts and benchmarks."""
    from pathlib import Path

    tests = Path(__file__).parent
    pkg = Path(specdec.__file__).parent
    packages = {p.name for p in pkg.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert folders - packages <= {"data", "fuzz", "vllm", "scripts", "benchmarks"}, folders - packages
    assert packages - folders == set(), f"packages without a tests folder: {packages - folders}"
    modules = {p.stem.lstrip("_") for p in pkg.glob("*.py")} - {"init__"} | {"layout", "lint", "examples"}
    stray = [p.name for p in tests.glob("test_*.py") if not any(p.stem[5:].startswith(m) for m in modules)]
    assert not stray, f"top-level tests not named after a top-level module: {stray}"


def test_at_most_three_module_names_repeat():
    """One name per concept: a basename in two packages is two concepts under one name (issue 31), with
    the subcommand modules' ``generate``/``review`` and the two ``report`` writers the allowed ones."""
    from collections import Counter
    from pathlib import Path

    names = Counter(p.name for p in Path(specdec.__file__).parent.rglob("*.py") if p.name != "__init__.py")
    repeated = sorted(n for n, c in names.items() if c > 1)
    assert len(repeated) <= 3, repeated


def test_the_top_level_holds_at_most_eight_modules():
    from pathlib import Path

    modules = sorted(p.name for p in Path(specdec.__file__).parent.glob("*.py"))
    assert len(modules) <= 8, modules


def test_docstrings_state_contracts_not_history():
    """Docstrings take at most 15% of specdec/'s lines and carry no dates: measurements and the
    history of what was tried live in docs/ (design-notes.md, performance.md)."""
    import ast
    import re
    from pathlib import Path

    total = doc = 0
    dated = []
    for path in Path(specdec.__file__).parent.rglob("*.py"):
        src = path.read_text()
        total += len(src.splitlines())
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
                        and isinstance(first.value.value, str):
                    doc += first.end_lineno - first.lineno + 1
        if re.search(r"20\d\d-[01]\d-[0-3]\d", src):
            dated.append(path.name)
    assert doc <= 0.15 * total, f"docstrings are {doc / total:.1%} of specdec/'s lines"
    assert not dated, f"dated text in {dated}"
