"""transformers is an extra: the HF verify path names its floor and the extra when it is missing or old."""

import sys

import pytest

from specdec._imports import TRANSFORMERS_MIN, _release, require_transformers


def test_release_parses_pep440_versions():
    assert _release("5.24.0") == (5, 24, 0)
    assert _release("5.19.1+cpu") == (5, 19, 1)
    assert _release("5.25.0.dev0") == (5, 25, 0)
    assert _release("5.24rc1") == (5, 24)


def test_installed_transformers_passes_the_floor():
    import transformers

    assert require_transformers("this test") is transformers
    assert _release(transformers.__version__) >= TRANSFORMERS_MIN


def test_an_older_transformers_is_refused_with_the_reason(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers, "__version__", "5.19.0")
    with pytest.raises(ImportError, match=r"HFTarget needs transformers>=5\.24 .*cache=.*has 5\.19\.0.*specdec\[hf\]"):
        require_transformers("HFTarget")


def test_a_missing_transformers_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import raises ImportError
    with pytest.raises(ImportError, match=r"not installed: pip install 'specdec\[hf\]'"):
        require_transformers("HFTarget")


def test_hf_target_checks_before_touching_the_model(monkeypatch):
    import transformers

    from specdec.verify import HFTarget

    monkeypatch.setattr(transformers, "__version__", "5.10.0")
    with pytest.raises(ImportError, match="HFTarget needs transformers"):
        HFTarget(object())  # not a model: the version check comes first


def test_the_parts_an_engine_environment_needs_import_without_transformers():
    # a subprocess, so the blocked import cannot leak into other tests' modules
    import subprocess

    code = ("import sys; sys.modules['transformers'] = None\n"
            "import specdec\n"
            "from specdec import SuffixProposer, LoadGate\n"
            "import specdec.integrations.vllm.drafter, specdec.plan.simulator, specdec.control.cost_gate\n"
            "import specdec.plan.vllm.engine_trace, specdec.plan.planner\n"
            "p = SuffixProposer(64); p.begin(0, [1, 2, 3, 1, 2]); assert len(p.propose([0], 4)) == 1\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
