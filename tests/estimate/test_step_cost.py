"""Cost model fit, persistence and calibration on a tiny random model; memory accounting."""

import json

import numpy as np
import pytest
import torch

from specdec.estimate.step_cost import Sample, StepCostModel, features
from specdec.measure.step_timing import calibrate
from specdec.plan.memory import ProposerMemory, admitted_concurrency, kv_bytes_per_token
from specdec.measure.proposer_stats import measure_proposer_memory, model_weight_bytes


def _synthetic_samples(w, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for b in (1, 2, 4, 8):
        for n in (1, 4, 16):
            for c in (32, 512):
                t = float(features(b, n, c) @ w) * (1 + noise * rng.standard_normal())
                out.append(Sample(b, n, c, t))
    return out


def test_fit_recovers_known_weights_and_reports_error():
    w = np.array([0.01, 0.001, 0.002, 1e-7, 2e-6, 0.004])
    m = StepCostModel.fit(_synthetic_samples(w))
    assert m.mean_rel_error < 1e-6 and m.loo_rel_error < 1e-4
    for b, n, c in ((3, 5, 100), (16, 1, 1000)):
        assert m.step_time(b, n, c) == pytest.approx(float(features(b, n, c) @ w), rel=1e-4)
    noisy = StepCostModel.fit(_synthetic_samples(w, noise=0.05))
    assert 0.005 < noisy.mean_rel_error < 0.2
    assert noisy.loo_rel_error >= noisy.mean_rel_error


def test_a_fit_by_time_reports_its_errors_weighted_by_time():
    samples = _synthetic_samples(np.array([0.01, 0.001, 0.002, 1e-7, 2e-6, 0.004]), noise=0.05)
    m = StepCostModel.fit(samples, {"model": "x"}, by_time=True, trim=False)
    y = np.array([s.seconds for s in samples])
    rel = np.abs(np.array([float(s.work() @ m.weights) for s in samples]) - y) / y
    assert m.mean_rel_error == pytest.approx(float(np.average(rel, weights=y)))
    assert m.mean_rel_error != pytest.approx(float(rel.mean()), rel=1e-3)
    assert m.meta == {"model": "x", "by_time": True}


def test_roundtrip_and_bad_files(tmp_path):
    m = StepCostModel.fit(_synthetic_samples(np.array([0.01, 0.001, 0.002, 1e-7, 2e-6, 0.004])), {"model": "x"})
    p = tmp_path / "cost.json"
    m.save(p)
    back = StepCostModel.load(p)
    assert np.allclose(back.weights, m.weights) and back.meta == {"model": "x"} and len(back.samples) == len(m.samples)
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        StepCostModel.load(p)
    p.write_text(json.dumps({"kind": "other"}))
    with pytest.raises(ValueError, match="not a StepCostModel"):
        StepCostModel.load(p)
    with pytest.raises(ValueError, match=">= 0"):
        StepCostModel(np.array([0.1, -1, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match="at least"):
        StepCostModel.fit(_synthetic_samples(np.ones(6))[:3])


def test_calibrate_times_a_real_forward_and_fits():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    model = LlamaForCausalLM(cfg).eval()
    m = calibrate(model, batches=(1, 2), tokens=(1, 4), contexts=(8, 32), prefills=(8, 16), repeats=1)
    # Every grid point is timed; timing outliers (load spikes) are set aside, not lost.
    assert len(m.samples) + len(m.outliers) == 2 * 2 * 2 + 2
    assert all(s.seconds > 0 for s in m.samples)
    assert np.isfinite(m.mean_rel_error) and m.meta["threads"] >= 1
    assert m.prefill_time([8, 16]) > 0


def test_calibrate_engine_times_the_verify_path():
    from specdec.models import tiny_model
    from specdec.measure.step_timing import calibrate_engine

    m = calibrate_engine(tiny_model(), batches=(1, 2), tokens=(1, 4), contexts=(8, 16), prefills=(8, 12), repeats=1)
    assert len(m.samples) + len(m.outliers) == 10 and m.meta["path"] == "HFTarget.verify"
    assert m.step_time(2, 4, 16) > 0


def test_kv_bytes_per_token_from_config():
    smol = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}
    assert kv_bytes_per_token(smol, "float32") == 2 * 30 * 3 * 64 * 4
    assert kv_bytes_per_token(smol, "bfloat16") == 2 * 30 * 3 * 64 * 2
    gpt2 = {"n_layer": 12, "n_head": 12, "n_embd": 768}
    assert kv_bytes_per_token(gpt2, "float16") == 2 * 12 * 12 * 64 * 2
    with pytest.raises(ValueError, match="num_hidden_layers"):
        kv_bytes_per_token({"hidden_size": 8})
    with pytest.raises(ValueError, match="unknown KV dtype"):
        kv_bytes_per_token(smol, "float13")


class _GrowingProposer:
    """Holds 1000 fixed bytes and 10 bytes per prompt token while a request is open."""

    def __init__(self):
        self.open = {}

    def begin(self, rid, prompt):
        self.open[rid] = len(prompt)

    def end(self, rid):
        del self.open[rid]

    def memory_bytes(self):
        return 1000 + 10 * sum(self.open.values())


def test_proposer_memory_and_admission():
    pm = measure_proposer_memory(_GrowingProposer(), list(range(50)))
    assert pm == ProposerMemory(1000, 10.0)
    kv = 100
    base = admitted_concurrency(1_000_000, weights_bytes=100_000, kv_bytes_token=kv, tokens_per_seq=500)
    assert base.sequences == 900_000 // (500 * kv)
    with_p = admitted_concurrency(1_000_000, weights_bytes=100_000, kv_bytes_token=kv, tokens_per_seq=500,
                                  proposer=ProposerMemory(200_000, 50.0), draft_budget=8)
    assert with_p.sequences == 700_000 // (508 * kv + 500 * 50)
    assert with_p.sequences < base.sequences
    with pytest.raises(ValueError, match="budget_bytes"):
        admitted_concurrency(-1, weights_bytes=0, kv_bytes_token=kv, tokens_per_seq=1)
    assert model_weight_bytes(torch.nn.Linear(4, 4)) == (16 + 4) * 4
