"""LoadGate: hysteresis without flapping, the acceptance floor, the budget optimizer, bad arguments."""

import math

import numpy as np
import pytest

from specdec.control.interface import BatchView, Outcome
from plan_fixtures import good_acceptance, gpu_like_cost, zero_acceptance

from specdec.control.load_gate import BudgetOptimizer, LoadGate


def _flaps(gate, trace):
    states = [gate.decide(BatchView(b)).speculate for b in trace]
    return sum(a != b for a, b in zip(states, states[1:]))


def test_hysteresis_does_not_flap_on_a_noisy_batch_trace():
    rng = np.random.default_rng(0)
    # a batch that hovers around the threshold of 8, with +-1 noise every step
    trace = [8 + int(x) for x in rng.integers(-1, 2, size=400)] + [3] * 20 + [12] * 20
    banded = LoadGate(off_above=8, on_below=6, budget=4)
    no_band = LoadGate(off_above=8, budget=4)
    assert _flaps(no_band, trace) > 50  # without a band the gate follows the noise
    assert _flaps(banded, trace) <= 3  # off once at the first 9, on at the dip to 3, off at 12


def test_gate_turns_off_above_and_back_on_below():
    g = LoadGate(off_above=4, on_below=2, budget=3)
    assert g.decide(BatchView(4)).budget == 3
    assert not g.decide(BatchView(5)).speculate
    assert not g.decide(BatchView(3)).speculate  # inside the band: stays off
    d = g.decide(BatchView(2))
    assert d.speculate and d.budget == 3
    assert g.switches == 2


def test_acceptance_floor_stops_drafting_and_probes():
    g = LoadGate(budget=4, min_accept_rate=0.3, probe_every=5, min_observed=8)
    assert g.decide(BatchView(1)).speculate
    for _ in range(10):
        g.observe(Outcome.of([4], [0]))
    decisions = [g.decide(BatchView(1)) for _ in range(10)]
    assert sum(d.speculate for d in decisions) == 2  # two probes of budget 1
    assert all(d.budget == 1 for d in decisions if d.speculate)
    for _ in range(40):
        g.observe(Outcome.of([4], [4]))
    assert g.decide(BatchView(1)).budget == 4


def test_optimizer_picks_zero_when_acceptance_is_zero_and_drafts_when_it_pays():
    cost = gpu_like_cost()
    assert BudgetOptimizer(cost, zero_acceptance()).best(1, 100.0)[0] == 0
    opt = BudgetOptimizer(cost, good_acceptance())
    k1, _ = opt.best(1, 100.0)
    k64, _ = opt.best(64, 100.0)
    assert k1 >= 3 and k64 == 0
    assert opt.best(1, 100.0, cap=2)[0] <= 2
    b = opt.crossover_batch(k1, 100.0)
    assert opt.rate(b, k1, 100.0) > opt.rate(b, 0, 100.0)
    assert opt.rate(b + 1, k1, 100.0) <= opt.rate(b + 1, 0, 100.0)


def test_gate_with_optimizer_follows_load():
    g = LoadGate(optimizer=BudgetOptimizer(gpu_like_cost(), good_acceptance()), budget=6)
    assert g.decide(BatchView(1)).budget >= 3
    assert not g.decide(BatchView(200)).speculate


@pytest.mark.parametrize("kwargs, match", [
    (dict(off_above=4, on_below=6), "on_below"),
    (dict(budget=-1), "budget"),
    (dict(min_accept_rate=1.5), "min_accept_rate"),
    (dict(ema=0.0), "ema"),
])
def test_bad_gate_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LoadGate(**kwargs)


def test_observe_rejects_impossible_counts():
    with pytest.raises(ValueError, match="accepted"):
        LoadGate().observe(Outcome.of([2], [3]))
    assert LoadGate().decide(BatchView(0)).speculate is False
    assert math.isinf(LoadGate().off_above)


def test_hysteresis_band_always_lets_the_gate_reopen():
    from specdec.plan.policies import hysteresis_band

    assert [hysteresis_band(t) for t in (0, 1, 2, 3, 4, 8, 16)] == [0, 1, 1, 2, 3, 6, 12]
