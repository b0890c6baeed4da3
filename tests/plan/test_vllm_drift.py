"""The drift check: off's full batch again after the last candidate, read against its first bursts."""

import math

import pytest

from test_vllm_burst_noise import _run, outcome
from specdec.plan.vllm.burst_noise import BurstNoise
from specdec.plan.vllm.calibrate import calibrate
from specdec.plan.vllm.drift import NOT_MEASURED, Drift, drift


def test_off_run_again_ten_percent_slower_reads_a_shift_of_log_1_1():
    cal = calibrate(_run("run_off.json"))
    first = [_run("run_off.json"), _run("run_off.json")]
    noise = BurstNoise.of(0.02, 4, 2)
    d = drift(first, [_run("run_off.json", 1.1), _run("run_off.json", 1.1)], cal, 2, noise, gap=0.012 * 1.1)
    # (approximately: a step 10% longer may group its chunks otherwise at the same gap)
    assert d.shift == pytest.approx(math.log(1.1), rel=0.05) and d.factor == pytest.approx(1.1, rel=0.01)
    assert d.se == pytest.approx(0.02) and d.bursts == 2 and d.told  # sqrt(1/2 + 1/2) = 1
    same = drift(first, first, cal, 2, noise)
    assert same.shift == pytest.approx(0.0, abs=1e-12) and not same.told


def test_a_told_shift_widens_the_band_and_the_overload_floor_one_within_noise_the_band_only():
    noise = BurstNoise.of(0.02, 4, 2)
    told, untold = Drift(0.10, 0.02, 2), Drift(0.03, 0.02, 2)
    assert told.told and not untold.told  # 0.10 > 1.96 * 0.02 > 0.03
    assert told.band(0.05) == pytest.approx(math.hypot(0.05, 0.10)) and untold.band(0.05) > 0.05
    assert told.floor(noise) == pytest.approx(1 - math.exp(-(1.645 * 0.02 + 0.10)))
    assert untold.floor(noise) == noise.floor
    # a shift whose noise was not measured is reported and widens the band, never the floor
    assert Drift(0.5, None, 1).floor(BurstNoise.of(0.0, 0, 1)) == 0.0 and not Drift(0.5, None, 1).told
    assert Drift(-0.10, 0.02, 2).floor(noise) == told.floor(noise)  # faster at the end counts as much


def test_no_full_batch_on_either_side_measures_nothing():
    cal = calibrate(_run("run_off.json"))
    noise = BurstNoise.of(0.02, 4, 2)
    assert drift([_run("run_off.json")], [], cal, 2, noise) is NOT_MEASURED
    assert drift([], [_run("run_off.json")], cal, 2, noise) is NOT_MEASURED
    assert drift([_run("run_off.json")], [_run("run_off.json")], cal, 99, noise) is NOT_MEASURED
    assert NOT_MEASURED.band(0.07) == 0.07 and NOT_MEASURED.floor(noise) == noise.floor and NOT_MEASURED.factor is None


def test_the_report_says_how_far_off_moved_and_what_it_widened():
    from specdec.plan.vllm.summary import _drift_line, _noise_line

    noise = BurstNoise.of(0.02, 4, 2)
    o = outcome(noise, Drift(math.log(1.15), 0.02, 2))
    assert "took 1.150x its first bursts' time" in _drift_line(o) and "beyond the bursts' noise" in _drift_line(o)
    assert "beyond 16% with the drift below." in _noise_line(o, 0.02)
    assert "within the bursts' noise" in _drift_line(outcome(noise, Drift(0.01, 0.02, 2)))
    assert _drift_line(outcome(noise)).startswith("Drift: not measured")
    assert "its bursts' noise was not measured" in _drift_line(outcome(BurstNoise.of(0.0, 0, 1), Drift(0.1, None, 1)))
