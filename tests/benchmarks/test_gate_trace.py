"""benchmarks/vllm/gate_trace.py: the traced drafter writes what its cost gate observes, and a
recorded vLLM CPU trace replays to the fit its decode steps say (the reference)."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks.vllm import gate_trace

TRACE = Path(__file__).parents[1] / "data" / "vllm_gate_trace.jsonl.gz"  # 2026-12-07, benchmarks/vllm/gate_trace.py


def _config(k=4, vocab=64):
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                           model_config=SimpleNamespace(get_vocab_size=lambda: vocab, max_model_len=400))


def test_a_recorded_vllm_trace_is_fitted_as_its_decode_steps_say():
    """At the trace's end the fit prices drafting within 10% of the reference at 1, 4 and 16 rows (fitted
    in absolute error: 0.18, 0.28, 0.43 against 0.28, 0.60, 1.04), and predicts the next decode step
    within 6% on average (absolute error: 7.6%)."""
    r = gate_trace.replay(gate_trace.load(TRACE))
    assert r["predicted"] > 200
    assert r["ratio"] == pytest.approx(r["ratio_reference"], rel=0.10)
    assert r["mean_rel"] < 0.06
    assert 0.0 <= r["drafts_full"] < 0.9  # fitted in absolute error it would draft at 98% of the full batches


def test_the_reference_recovers_a_known_engine():
    rng = np.random.default_rng(0)
    trace = []
    for i in range(300):
        rows, j = int(rng.integers(1, 17)), int(i % 3)
        drafted = [j] * rows
        sec = (0.05 + 0.007 * rows + (j > 0) * (0.01 + 0.005 * j * rows)) * (1 + 0.02 * rng.standard_normal())
        trace.append({"drafted": drafted, "accepted": [0] * rows, "budget": j, "seconds": sec, "fit": True,
                      "offered": None, "prefill": 0})
    trace.append({**trace[0], "seconds": 30.0, "prefill": 3})  # a prefill step: not the reference's
    assert gate_trace.reference(trace) == pytest.approx([0.05, 0.007, 0.01, 0.005], rel=0.1)


def test_the_traced_drafter_writes_each_observation_its_gate_gets(tmp_path, monkeypatch):
    monkeypatch.delenv(gate_trace.TRACE_ENV, raising=False)
    with pytest.raises(ValueError, match=gate_trace.TRACE_ENV):
        gate_trace.TracedDrafter(_config())
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(gate_trace.TRACE_ENV, str(path))
    d = gate_trace.TracedDrafter(_config())
    for t in range(5):
        d.gating.decide(3, 10.0)
        d.gating.observe(np.array([2, 0, 1]), np.array([1, 0, 1]), now=0.1 * t, prefill=t % 2)
    lines = gate_trace.load(path)
    assert len(lines) == 5 and lines[0]["seconds"] is None and lines[1]["seconds"] == pytest.approx(0.1)
    assert lines[1]["drafted"] == [2, 0, 1] and lines[1]["accepted"] == [1, 0, 1] and lines[1]["prefill"] == 1
    f, _ = d.gating.cost.depth_acceptance()
    assert f[0] == pytest.approx(0.6)  # the gate itself observed them: depth 1 reached by 2 of 3 rows once


def test_bad_arguments_are_refused_before_any_server(tmp_path, capsys):
    for argv, why in ((["--servers", "0"], "--servers and --bursts must be >= 1"),
                      (["--replay", str(tmp_path)], "no trace*.jsonl there")):
        with pytest.raises(SystemExit):
            gate_trace.main(argv)
        assert why in capsys.readouterr().err
