"""Pool TOML: a valid file parses into policies; every kind of mistake gets an error naming it."""

import math

import pytest

from specdec.plan.policies import AlwaysOn, Gated, Off
from specdec.plan.pools import dump_pools, load_pools, parse_pools

GOOD = """
[pools.interactive]
ttft_s = 1.0
tpot_s = 0.08
proposer = "suffix"
policy = "gated"
budget = 4

[pools.interactive.gate]
off_above = 8
on_below = 6
min_accept_rate = 0.1

[pools.batch]
ttft_s = 30
tpot_s = 1.0
policy = "off"
"""


def test_valid_config_parses_and_roundtrips(tmp_path):
    pools = parse_pools(GOOD)
    assert list(pools) == ["interactive", "batch"]
    it = pools["interactive"]
    assert it.slo.ttft_s == 1.0 and it.proposer == "suffix" and it.gate.off_above == 8 and it.gate.on_below == 6
    pol = it.make_policy()
    assert isinstance(pol, Gated) and pol.gate.off_above == 8 and pol.max_budget == 4
    assert isinstance(pools["batch"].make_policy(), Off) and pools["batch"].proposer is None
    p = tmp_path / "pools.toml"
    p.write_text(dump_pools(pools))
    assert load_pools(p) == pools


@pytest.mark.parametrize(
    "text, match",
    [
        ("[pools.a]\ntpot_s = 1\n", "missing required key 'ttft_s'"),
        ("[pools.a]\nttft_s = 1\ntpot_s = 0\n", r"pools.a.tpot_s must be > 0"),
        ('[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "sometimes"\n', "policy must be one of"),
        ('[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "always"\n', "needs a proposer"),
        (
            '[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "gated"\nproposer = "suffix"\n',
            "needs a \\[pools.a.gate\\] table",
        ),
        ("[pools.a]\nttft_s = 1\ntpot_s = 1\nbudgit = 3\n", r"unknown keys \['budgit'\]"),
        (
            '[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "gated"\nproposer = "s"\n[pools.a.gate]\noff_above = '
            '4\non_below = 6\n',
            "on_below \\(6\\) must be <= off_above \\(4\\)",
        ),
        (
            '[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "gated"\nproposer = "s"\n[pools.a.gate]\non_below = 2\n',
            "missing required key 'off_above'",
        ),
        (
            '[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "gated"\nproposer = "s"\n[pools.a.gate]\noff_above = 4.5\n',
            "must be an integer",
        ),
        (
            '[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "off"\n[pools.a.gate]\noff_above = 4\n',
            "no effect with policy 'off'",
        ),
        ('[pools.a]\nttft_s = "fast"\ntpot_s = 1\n', "must be a number"),
        ("[pools.a]\nttft_s = 1\ntpot_s = 1\nbudget = 0\n", "budget must be >= 1"),
        (
            '[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "gated"\nproposer = "s"\n[pools.a.gate]\noff_above = '
            '4\nmin_accept_rate = 2\n',
            "min_accept_rate must be in",
        ),
        ("[pool.a]\nttft_s = 1\n", "unknown top-level keys"),
        ("", "no pools defined"),
        ("[pools.a\n", "not valid TOML"),
    ],
)
def test_mistakes_are_named(text, match):
    with pytest.raises(ValueError, match=match):
        parse_pools(text, "x.toml")


def test_adaptive_needs_an_optimizer_and_always_is_fixed():
    pools = parse_pools(
        '[pools.a]\nttft_s = 1\ntpot_s = 1\npolicy = "adaptive"\nproposer = "s"\n'
        '[pools.b]\nttft_s = 1\ntpot_s = 1\npolicy = "always"\nproposer = "s"\nbudget = 3\n'
    )
    with pytest.raises(ValueError, match="needs a BudgetOptimizer"):
        pools["a"].make_policy()
    assert isinstance(pools["b"].make_policy(), AlwaysOn) and pools["b"].make_policy().budget == 3
    assert math.isinf(pools["a"].gate.off_above if pools["a"].gate else math.inf)


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_pools(tmp_path / "nope.toml")


def test_shipped_example_config_parses():
    from pathlib import Path

    pools = load_pools(Path(__file__).resolve().parents[2] / "docs" / "pools.example.toml")
    assert pools["interactive"].policy == "gated" and pools["batch"].policy == "off"
