"""The replay benchmarks' own logic (benchmarks.replay.lookup_ceiling, benchmarks.replay.draft_sizing,
benchmarks.engine.trained_proposers): the bound and the replayed policy must compute what their docs
claim, on hand-checked cases."""

import pytest

from benchmarks.common.cost_curve import parse_curve
from benchmarks.common.report import accepted_histogram, depth_acceptance, ratio_ci
from benchmarks.engine import trained_proposers as trained
from benchmarks.replay import draft_sizing, lookup_ceiling
from specdec.estimate.verify_cost import VerifyCostModel


def test_copy_lengths_follow_the_anchor():
    context = [1, 2, 3, 4]
    answer = [2, 3, 4, 9, 9, 5]
    # anywhere: "2 3 4" is in the context; "9" only once committed; the last token is never drafted
    assert lookup_ceiling.copy_lengths(context, answer) == [3, 2, 1, 0, 1, 0]
    # after a 1-token match: position 0 follows "4", whose continuation is unseen
    assert lookup_ceiling.copy_lengths(context, answer, min_match=1)[0] == 0
    assert lookup_ceiling.copy_lengths([1, 2, 3, 1], [2, 3, 5], min_match=1) == [2, 1, 0]  # "1" was followed by "2 3"


def test_best_schedule_is_the_cheapest_cover():
    # one verify of k drafted nodes costs 1 + 0.1 k: drafting all 3 copyable tokens at once is best
    cost, steps = lookup_ceiling.best_schedule([3, 2, 1, 0], [1.0, 1.1, 1.2, 1.3])
    assert (round(cost, 6), steps) == (1.3, 1)
    # drafts that cost more than a step never pay
    cost, steps = lookup_ceiling.best_schedule([3, 2, 1, 0], [1.0, 2.5, 4.0, 5.5])
    assert (cost, steps) == (4.0, 4)


def test_replayed_policy_counts_every_answer_token():
    rows = [{"category": "a", "prompt_ids": [1, 2, 3, 1, 2, 3], "output_ids": [1, 2, 3, 1, 2, 3, 7]},
            {"category": "b", "prompt_ids": [5, 6], "output_ids": [8, 9, 10]}]
    cost = VerifyCostModel([0, 1, 4], [1.0, 1.02, 1.08])
    for variant in draft_sizing.VARIANTS.values():
        totals = draft_sizing.replay(rows, variant, cost, budget=4)
        assert totals[None]["tokens"] == 10 and totals["a"]["tokens"] == 7 and totals["b"]["tokens"] == 3
        assert totals[None]["steps"] <= 10 and totals[None]["cost"] >= totals[None]["steps"]
    assert draft_sizing.replay(rows, draft_sizing.VARIANTS["per-depth"], cost, 4)["a"]["accepted"] > 0


@pytest.mark.parametrize("text", ["abc", "0:1,x:2", "1:20,2:30"])
def test_bad_cost_curves_are_refused_by_name(text):
    with pytest.raises(SystemExit, match="--cost"):
        parse_curve(text)


def test_an_unknown_ask_is_refused_before_any_work(capsys):
    with pytest.raises(SystemExit):
        draft_sizing.main(["--ask", "adaptive,sometimes", "--cost", "0:22,1:24"])
    assert "--ask takes adaptive and/or fixed, got 'adaptive,sometimes'" in capsys.readouterr().err


@pytest.mark.parametrize("flag, spec, message", [
    ("--no-model-gate", "suffix", "--no-model-gate takes hybrid proposers, got 'suffix'"),
    ("--bucket-gate", "eagle:{dir}", "--bucket-gate takes hybrid proposers, got 'eagle:{dir}'"),
    ("--fp32-head", "suffix", "--fp32-head takes medusa, eagle or hybrid proposers, got 'suffix'"),
])
def test_trained_proposers_refuses_a_variant_its_proposer_lacks_before_loading(monkeypatch, capsys, tmp_path, flag,
                                                                                 spec, message):
    spec, message = spec.format(dir=tmp_path), message.format(dir=tmp_path)  # an EAGLE spec needs a directory
    import specdec.models

    def no_load(*a, **k):
        raise AssertionError("the model must not load for a refused command")

    monkeypatch.setattr(specdec.models, "load_default", no_load)
    with pytest.raises(SystemExit):
        trained.main(["--prompts", "x.jsonl", "--proposers", "suffix", flag, spec])
    assert message in capsys.readouterr().err


def test_ratio_ci_is_paired_and_covers_the_point_ratio():
    # Prompts of very different length, the same 1.5x on each: pairing gives a zero-width interval;
    # resampling the two columns independently would have spread it over 0.3x-7x.
    slow = [10.0, 100.0, 1.0, 40.0]
    fast = [s / 1.5 for s in slow]
    lo, hi = ratio_ci(slow, fast)
    assert lo == pytest.approx(1.5) and hi == pytest.approx(1.5)
    mixed = [1.0, 2.0, 1.0, 2.0]
    lo, hi = ratio_ci([2.0, 2.0, 2.0, 2.0], mixed)  # per-prompt ratios 2 and 1
    assert 1.0 <= lo < 2.0 * 4 / 6 < hi <= 2.0
    assert ratio_ci([3.0], [2.0]) == (1.5, 1.5)
    with pytest.raises(ValueError, match="equal-length"):
        ratio_ci([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="level"):
        ratio_ci([1.0], [1.0], level=1.0)


def test_trained_proposers_table_gives_intervals_and_the_ratio_to_suffix():
    from specdec.measure.speedup import Run
    from specdec.engine.metrics import RequestMetrics

    def run(method, cat, seconds, tokens):
        return Run(method, cat, seconds, tokens, RequestMetrics(steps=4, tokens=len(tokens)))

    runs = []
    for cat, plain_s in (("a", 4.0), ("a", 8.0), ("b", 6.0)):
        out = [1, 2, 3]
        runs += [run("plain", cat, plain_s, out), run("suffix", cat, plain_s / 2, out),
                 run("hybrid", cat, plain_s / 2.5, out if cat == "a" else [9])]
    t = trained.table(runs, None)
    assert t["overall"]["hybrid"]["speedup"] == pytest.approx(2.5, abs=1e-3)
    assert t["overall"]["hybrid"]["speedup_ci"] == pytest.approx([2.5, 2.5], abs=1e-3)
    assert t["a"]["hybrid"]["vs_suffix"] == pytest.approx(1.25, abs=1e-3)
    assert "vs_suffix" not in t["a"]["suffix"] and "vs_suffix" not in t["a"]["plain"]
    assert t["b"]["hybrid"]["mismatches"] == 1 and t["a"]["hybrid"]["mismatches"] == 0


def test_acceptance_by_depth_reads_the_histogram_of_accepted_lengths():
    hist = accepted_histogram([0, 2, 2, 3, 1], budget=4)
    assert hist == [1, 1, 2, 1, 0]
    assert depth_acceptance(hist) == [0.8, 0.6, 0.2]  # P(accepted >= 1), >= 2, >= 3; none reached 4
    with pytest.raises(ValueError, match="outside \\[0, 4\\]"):
        accepted_histogram([5], budget=4)
