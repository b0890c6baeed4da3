"""Benchmark tables: each method's speedup is over its own stack's plain decoding."""

import pytest

from specdec.measure.speedup import Run, markdown, summarize


def test_speedups_use_each_stacks_own_plain_decoding():
    runs = [Run("plain", "qa", 2.0, [1, 2]), Run("suffix", "qa", 1.0, [1, 2]),
            Run("hf_generate", "qa", 4.0, [1, 2]), Run("hf_prompt_lookup", "qa", 5.0, [1, 3])]
    table = summarize(runs)
    rows = table["qa"]
    assert rows["suffix"].speedup == pytest.approx(2.0) and rows["suffix"].baseline == "plain"
    assert rows["hf_generate"].speedup == pytest.approx(0.5) and rows["hf_generate"].baseline == "plain"
    assert rows["hf_prompt_lookup"].speedup == pytest.approx(0.8)
    assert rows["hf_prompt_lookup"].baseline == "hf_generate"
    assert rows["hf_prompt_lookup"].mismatches == 1  # outputs are always checked against plain
    assert "| hf_prompt_lookup | 0.4 | 0.80x | hf_generate |" in markdown(table)


def test_hf_methods_fall_back_to_plain_without_hf_generate():
    table = summarize([Run("plain", "qa", 2.0, [1]), Run("hf_prompt_lookup", "qa", 1.0, [1])])
    assert table["overall"]["hf_prompt_lookup"].baseline == "plain"
    assert table["overall"]["hf_prompt_lookup"].speedup == pytest.approx(2.0)


def test_online_speedup_checks_outputs_and_reports_both_times():
    from specdec.measure.speedup import online_speedup
    from specdec.models import tiny_model
    from specdec.proposers.suffix import SuffixProposer

    model = tiny_model()
    res = online_speedup(model, SuffixProposer(model.config.vocab_size), [[1, 2, 3, 1, 2, 3], [4, 5, 4, 5]],
                         budget=4, max_new_tokens=8, name="suffix")
    assert res["prompts"] == 2 and res["plain_s"] > 0 and res["suffix_s"] > 0
    plain_s, suffix_s = res["plain_s"], res["suffix_s"]  # rounded to 0.01 s, the speedup from the unrounded
    slack = plain_s / suffix_s * (0.005 / plain_s + 0.005 / suffix_s) * 1.01 + 5e-4
    assert res["speedup"] == pytest.approx(plain_s / suffix_s, abs=slack)  # plain over speculative, not inverted
    auto = online_speedup(model, SuffixProposer(model.config.vocab_size), [[1, 2, 3, 1, 2, 3]], budget="auto",
                          max_new_tokens=8, max_budget=6)
    assert auto["budget"] == "auto" and auto["max_new_tokens"] == 8 and "speculative_s" in auto
    with pytest.raises(ValueError, match="at least one prompt"):
        online_speedup(model, SuffixProposer(model.config.vocab_size), [], budget=4, max_new_tokens=8)


def test_online_speedup_reports_tokens_per_step_as_the_metrics_define_it():
    """The same decoder run by hand (greedy and a fixed budget: deterministic, the warm-up included)
    gives the rate online_speedup must report."""
    from specdec import SpeculativeDecoder
    from specdec.measure.speedup import online_speedup
    from specdec.models import tiny_model
    from specdec.proposers.suffix import SuffixProposer

    model = tiny_model()
    prompts = [[1, 2, 3, 1, 2, 3], [4, 5, 4, 5]]
    res = online_speedup(model, SuffixProposer(64), prompts, budget=4, max_new_tokens=8, name="suffix")
    dec = SpeculativeDecoder(model, SuffixProposer(64), max_budget=4, budget=4)
    dec.generate(prompts[0], 4)  # online_speedup's warm-up teaches the suffix cache too
    metrics = [dec.generate(p, 8).metrics for p in prompts]
    assert sum(m.accepted for m in metrics) > 0
    want = sum(m.tokens - 1 for m in metrics) / sum(m.steps for m in metrics)
    assert res["tokens_per_step"] == pytest.approx(want, abs=1e-3)


def test_load_note_warns_when_the_machine_was_oversubscribed():
    from specdec.measure.speedup import load_note

    assert load_note(0.5, 1.4, 2) == "load average 0.5 -> 1.4 on 2 cores"
    assert "WARNING: the machine was oversubscribed" in load_note(0.5, 4.2, 2)
    assert "WARNING" not in load_note(0.9, 2.0, 2)  # the benchmark's own two threads fill two cores
    assert "WARNING" in load_note(2.6, 1.0, 2)
