"""The audit on engines: honest ones pass, every mutant is flagged, an inconclusive case never passes.

* the reference engine (honest by construction) and specdec's own decoder are *exact* on the
  settings they run; the decoder's adapter refuses, with the reason, what it cannot run;
* each mutant of :mod:`specdec.conformance.audit.broken_engines` is *biased* (scope: speculation) on the
  setting that exercises its bug;
* an engine that does not report acceptance, or whose drafts never land, is *inconclusive*, and the
  command line exits 1 for it;
* a finding's reproducer runs with numpy alone and rejects the biased engine.

Sample sizes are small, yet every mutant's p-value is at least ten times below the per-test level
(most are below 1e-10), so the file takes about a minute of CPU.
"""

import subprocess
import sys

import numpy as np
import pytest

from specdec.conformance.audit import AuditConfig, CallableEngine, LogitTables, Refused, Samples, audit, select
from specdec.conformance.audit.adapters.specdec_decoder import SpecdecEngine
from specdec.conformance.audit.fixtures import audit_prompts, audit_target
from specdec.conformance.audit.broken_engines import FLAGGED_BY, MUTANTS
from specdec.conformance.audit.honest_engine import ReferenceEngine
from specdec.conformance.audit.report import markdown, matrix, to_json, write_report

pytestmark = pytest.mark.usefixtures("one_thread")
LENGTH = 5


@pytest.fixture(scope="module")
def model():
    return audit_target()


@pytest.fixture(scope="module")
def prompts(model):
    return audit_prompts(model, 3)


@pytest.fixture(scope="module")
def tables(model):
    return LogitTables(model, LENGTH)


def test_reference_engine_is_exact_on_the_quick_settings(model, prompts, tables):
    config = AuditConfig(prompts, select(None, quick=True), samples=250, max_tv=0.2)
    report = audit(ReferenceEngine(model, LENGTH, tables=tables), model, config, tables=tables)
    verdicts = {c.setting: c.verdict.verdict for c in report.cases}
    assert set(verdicts.values()) == {"exact"}, markdown([report])
    assert all(c.accepted_per_request > 1 for c in report.cases)


@pytest.mark.parametrize("name", list(MUTANTS))
def test_every_mutant_engine_is_flagged(model, prompts, tables, name):
    setting = FLAGGED_BY[name]
    config = AuditConfig(prompts, select([setting]), samples=150 if setting == "mixed" else 300)
    report = audit(MUTANTS[name](model, LENGTH, tables=tables), model, config, tables=tables)
    case = report.cases[0]
    assert (case.verdict.verdict, case.verdict.scope) == ("biased", "speculation"), markdown([report])
    assert min(t.p_value for t in case.two_sample + case.spec_tests) < config.per_test_alpha / 10  # not borderline
    assert min(t.p_value for t in case.plain_tests) > config.per_test_alpha  # the plain arm is honest
    row = matrix([report]).splitlines()[2]
    assert row.startswith(f"| {report.engine['engine']}/{report.engine['method']} |") and "| BIASED |" in row


def test_specdec_decoder_is_exact_and_refuses_what_it_cannot_run(model, prompts, tables):
    config = AuditConfig(prompts, select(["temperature", "repetition_penalty", "presence_penalty", "mixed"]),
                         samples=200, max_tv=0.25)
    report = audit(SpecdecEngine(model), model, config, tables=tables)
    v = {c.setting: c for c in report.cases}
    assert v["temperature"].verdict.verdict == "exact", markdown([report])
    assert v["repetition_penalty"].verdict.verdict == "exact", markdown([report])
    assert v["presence_penalty"].verdict.verdict == "refused" and "presence" in v["presence_penalty"].message
    assert v["mixed"].verdict.verdict == "refused" and "mix" in v["mixed"].message


def _plain_engine(model, tables, *, report_acceptance: bool):
    """A callable engine that never speculates: honest samples, acceptance reported as 0 or not at all."""
    inner = ReferenceEngine(model, LENGTH, tables=tables)

    def run(prompts, sampling, n, seed, speculative):
        from specdec.conformance.audit import Job

        out = inner.run([Job(tuple(map(tuple, prompts)), tuple(sampling), n, seed)], False)[0]
        return out if report_acceptance else out.outputs

    return CallableEngine(run, name="plain-only")


@pytest.mark.parametrize("report_acceptance", [True, False])
def test_no_landed_drafts_is_inconclusive_never_a_pass(model, prompts, tables, report_acceptance):
    config = AuditConfig(prompts, select(["temperature"]), samples=200, max_tv=1.0)
    report = audit(_plain_engine(model, tables, report_acceptance=report_acceptance), model, config, tables=tables)
    case = report.cases[0]
    assert case.verdict.verdict == "inconclusive" and not case.verdict.passed, case.verdict
    assert max(t.p_value for t in case.spec_tests) > config.per_test_alpha  # nothing rejected: still no pass
    assert ("0.000 accepted" in case.verdict.reason) if report_acceptance else ("did not report" in case.verdict.reason)


def test_cli_exits_one_on_an_inconclusive_case(tmp_path, monkeypatch):
    from specdec.cli import main
    from specdec.cli import audit as cli_audit

    monkeypatch.setattr(cli_audit, "_engines", lambda args, model, out: [_plain_engine(
        model, LogitTables(model, LENGTH), report_acceptance=True)])
    code = main(["audit", "--engine", "reference", "--settings", "temperature", "--samples", "60", "--prompts", "1",
                 "--out", str(tmp_path)])
    assert code == 1
    assert "inconclusive" in (tmp_path / "audit.md").read_text()


def test_callable_engine_passes_refusals_and_failures_through(model, prompts):
    def engine(prompts, sampling, n, seed, speculative):
        if sampling[0].top_k is not None:
            raise Refused("top_k is not supported with speculation")
        if sampling[0].repetition_penalty != 1.0:
            raise RuntimeError("kernel exploded")
        return Samples([[[6] * s.max_tokens for _ in range(n)] for s in sampling], drafted=0, accepted=0, requests=1)

    config = AuditConfig(prompts, select(["top_k", "repetition_penalty"]), samples=20)
    report = audit(CallableEngine(engine), model, config)
    v = {c.setting: c for c in report.cases}
    assert v["top_k"].verdict.verdict == "refused" and v["top_k"].message == "top_k is not supported with speculation"
    assert v["repetition_penalty"].verdict.verdict == "error" and "kernel exploded" in v["repetition_penalty"].message
    assert to_json(report)["cases"][0]["verdict"] == "refused"


class _StuckEngine:
    """Always emits the target's favourite token: biased; writes a numpy-only reproducer of itself."""

    name, method, profile = "stuck", "always-6", "vllm"

    def describe(self):
        return {"engine": self.name, "method": self.method}

    def run(self, jobs, speculative):
        return [Samples([[[6] * s.max_tokens for _ in range(j.n)] for s in j.sampling], drafted=j.outputs,
                        accepted=j.outputs, requests=j.outputs) for j in jobs]

    def reproducer_source(self, job):
        return (f"def generate(speculative):\n"
                f"    return [[[6] * {LENGTH} for _ in range({job.n})] for _ in range({len(job.prompts)})]\n")


def test_reproducer_needs_only_numpy_and_reproduces(model, prompts, tables, tmp_path):
    config = AuditConfig(prompts[:1], select(["temperature"]), samples=50)
    engine = _StuckEngine()
    report = audit(engine, model, config, tables=tables)
    assert report.cases[0].verdict.verdict == "biased"
    written = write_report([report], tmp_path, engines=[engine])
    script = next(p for p in written if p.suffix == ".py")
    np.load(script.with_suffix(".npz"))  # the laws travel with the script
    run = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "REJECTED" in run.stdout and "import torch" not in script.read_text()
