"""csrc/'s layering, read from its #include lines: the math and the automaton are torch- and
pybind-free, the launchers bind nothing, and all Python glue lives in csrc/bindings/."""

import pathlib
import re

import pytest

CSRC = pathlib.Path(__file__).resolve().parent.parent / "csrc"
SOURCES = sorted(p for p in CSRC.rglob("*") if p.suffix in {".h", ".cuh", ".cpp", ".cu"})
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
FRAMEWORK = ("torch/", "ATen/", "c10/", "pybind11/", "Python.h")
GLUE = re.compile(r"\b(PYBIND11_MODULE|TORCH_LIBRARY|TORCH_LIBRARY_IMPL|TORCH_LIBRARY_FRAGMENT)\b")

# folder -> the csrc folders its quoted includes may name
ALLOWED = {
    "suffix": {"suffix"},
    "kernels": {"kernels"},
    "ops": {"ops", "kernels"},
    "bindings": {"bindings", "ops", "suffix"},
}


def _folder(path):
    return path.relative_to(CSRC).parts[0]


def _includes(path):
    return INCLUDE.findall(path.read_text())


def test_every_source_sits_in_a_known_folder():
    assert SOURCES, "no C++ sources found under csrc/"
    assert {_folder(p) for p in SOURCES} <= set(ALLOWED), sorted({str(p.relative_to(CSRC)) for p in SOURCES})


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(CSRC)))
def test_includes_follow_the_layering(path):
    folder = _folder(path)
    for kind, name in _includes(path):
        if kind == '"':
            assert name.split("/")[0] in ALLOWED[folder], f"{path.relative_to(CSRC)} includes \"{name}\""
        elif folder in ("suffix", "kernels"):
            assert not name.startswith(FRAMEWORK), f"{path.relative_to(CSRC)} (torch-free) includes <{name}>"
        elif folder == "ops":
            assert not name.startswith(("pybind11/", "Python.h", "torch/library.h")), (
                f"{path.relative_to(CSRC)} (a launcher) includes binding glue <{name}>")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(CSRC)))
def test_module_and_op_registration_live_in_bindings(path):
    found = GLUE.findall(path.read_text())
    assert _folder(path) == "bindings" or not found, f"{path.relative_to(CSRC)} registers {sorted(set(found))}"

