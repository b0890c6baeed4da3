"""Engine calibration from outside: together-decoding gaps, burst cost samples, counter histograms."""

import numpy as np
import pytest

from specdec.estimate.step_cost import StepCostModel, features
from specdec.plan.vllm.engine_trace import acceptance_from_counters, decode_sample, together_gaps
from specdec.plan.simulator import _Sampler


def test_together_gaps_keeps_only_steps_where_every_request_decoded():
    # request 0 decodes alone from 0.0 to 0.2 (steps of 0.1), then both decode with steps of 0.25,
    # then request 1 decodes alone after request 0 ends at 1.2
    r0 = [0.0, 0.1, 0.2, 0.45, 0.7, 0.95, 1.2]
    r1 = [0.2, 0.45, 0.7, 0.95, 1.2, 1.3, 1.4]
    gaps = together_gaps([r0, r1])
    assert gaps == pytest.approx([0.25] * 8)
    with pytest.raises(ValueError, match="no step had all 2"):
        together_gaps([[0.0, 0.1], [0.5, 0.6]])
    with pytest.raises(ValueError, match="ascending"):
        together_gaps([[0.2, 0.1]])
    with pytest.raises(ValueError, match="two chunk times"):
        together_gaps([[0.1]])


def test_decode_sample_carries_mean_tokens_and_drafting_rows():
    times = [list(np.arange(0, 2.0, 0.1)) for _ in range(4)]
    s = decode_sample(times, 150.0, row_steps=200, drafts=50, draft_tokens=150)
    assert (s.batch, s.context) == (4, 150.0)
    assert s.seconds == pytest.approx(0.1)
    assert s.tokens == pytest.approx(1.75) and s.multi_rows == pytest.approx(1.0)
    plain = decode_sample(times, 150.0)
    assert plain.tokens == 1.0 and plain.multi_rows == 0.0
    with pytest.raises(ValueError, match="inconsistent counters"):
        decode_sample(times, 150.0, row_steps=10, drafts=20, draft_tokens=20)


def test_features_multi_rows_overrides_the_all_rows_default():
    assert features(4, 3, 10)[5] == 4.0 and features(4, 1, 10)[5] == 0.0
    assert features(4, 1.5, 10, multi_rows=1.0)[5] == 1.0


def test_a_model_fitted_on_burst_samples_recovers_a_known_engine():
    # the engine: 20 ms a step, 3 ms a row, 1 ms a token, 15 ms more per drafting row; bursts at
    # six batch sizes, three drafting shares and two draft lengths, 1% timing noise
    w = np.array([0.020, 0.003, 0.001, 0.0, 0.0, 0.015])
    truth = StepCostModel(w)
    samples = []
    rng = np.random.default_rng(0)
    for b in (1, 2, 4, 8, 12, 16):
        for share in (0.0, 0.3, 0.8):
            for length in ((2, 4) if share else (0,)):
                n, m = 1 + length * share, b * share
                step = float(features(b, n, 100, m) @ w) * (1 + 0.01 * rng.standard_normal())
                samples.append(decode_sample([list(np.arange(30) * step)] * b, 100.0, row_steps=1000,
                                             drafts=int(1000 * share), draft_tokens=int(1000 * share * length)))
    fit = StepCostModel.fit(samples, trim=False)
    for pieces in ([(1, 100)] * 8, [(3, 100)] * 4 + [(1, 100)] * 4, [(5, 100)] * 6 + [(1, 100)] * 10):
        assert fit.packed_step_time(pieces) == pytest.approx(truth.packed_step_time(pieces), rel=0.05)


def test_acceptance_from_counters_rebuilds_the_chain_histogram():
    # 1000 row-steps, 400 drafted (1000 tokens, mean 2.5), accepted >= 1: 300, >= 2: 120, >= 3: 40, >= 4: 10
    d = acceptance_from_counters(1000, 400, 1000, [300, 120, 40, 10], name="x")
    assert d.counts.tolist() == [700, 180, 80, 30, 10]
    assert d.drafted.tolist() == [600, 0, 200, 200, 0]
    assert d.max_budget == 4
    # a sampler drawing from it keeps accepted <= drafted and reproduces the means
    s = _Sampler(0)
    draws = np.array([s.draw(d, 4) for _ in range(40_000)])
    assert np.all(draws[:, 1] <= draws[:, 0])
    assert draws[:, 1].mean() == pytest.approx(470 / 1000, rel=0.05)
    assert np.mean(draws[:, 0]) == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("args, match", [
    ((100, 50, 100, [20, 30]), "non-increasing"),
    ((100, 10, 30, [20, 5]), "accepted\\[0\\] <= drafts"),
    ((100, 10, 50, [5, 2]), "draft_tokens 50"),
    ((0, 0, 0, [0]), "row_steps > 0"),
    ((10, 5, 5, []), "one entry per draft position"),
])
def test_acceptance_from_counters_refuses_inconsistent_counters(args, match):
    with pytest.raises(ValueError, match=match):
        acceptance_from_counters(*args)


def fake_packed_engine(arrivals, prompt_lens, output_len, cost, jitter, rng):
    """A packed engine (prefill rides in decode steps, no drafts) seen from the client: Streams."""
    from specdec.plan.vllm.engine_trace import Stream

    t, nxt, running, chunks = 0.0, 0, [], [[] for _ in arrivals]
    while nxt < len(arrivals) or running:
        if not running and nxt < len(arrivals):
            t = max(t, arrivals[nxt])
        new = []
        while nxt < len(arrivals) and arrivals[nxt] <= t:
            new.append(nxt)
            nxt += 1
        pieces = [(1, prompt_lens[i] + len(chunks[i])) for i in running] + [(prompt_lens[i], 0) for i in new]
        t += cost.packed_step_time(pieces)
        for i in running + new:
            chunks[i].append(t + abs(rng.normal(0, jitter)))
        running = [i for i in running + new if len(chunks[i]) < output_len]
    return [Stream(a, p, sorted(c)) for a, p, c in zip(arrivals, prompt_lens, chunks)]


def test_steps_rebuilt_from_client_streams_recover_the_engine_cost():
    from specdec.plan.vllm.engine_trace import cluster_steps, trace_samples

    truth = StepCostModel(np.array([0.030, 0.002, 0.0015, 0.0, 0.0, 0.020]))
    rng = np.random.default_rng(3)
    # arrivals at a rising rate (0.5 -> 6 per second): batch sizes from 1 to ~10, prefills mixed in
    rates = np.linspace(0.5, 6.0, 40)
    arrivals = np.cumsum(rng.exponential(1 / rates))
    prompts = rng.integers(20, 400, size=40).tolist()
    streams = fake_packed_engine(arrivals, prompts, 32, truth, jitter=0.002, rng=rng)
    steps = cluster_steps(streams, gap=0.012)
    assert sum(len(s) for s in steps) == 40 * 32
    samples = trace_samples(streams, gap=0.012)
    mixed = [s for s in samples if s.terms[5] > 0 and s.terms[1] > 1]
    assert len(samples) > 100 and len(mixed) > 10  # prefill pieces riding in decode steps were seen
    fit = StepCostModel.fit(samples)
    for pieces in ([(1, 200)] * 8, [(1, 150)] * 4 + [(300, 0)], [(120, 0)]):
        assert fit.packed_step_time(pieces) == pytest.approx(truth.packed_step_time(pieces), rel=0.05)


def fake_chunking_engine(arrivals, prompt_lens, output_len, cost, engine):
    """vLLM V1's scheduler seen from the client: each step the decode rows take a token each of
    ``engine.max_batched_tokens``, then prompts that arrived by the step's start take what is left,
    first come first served, a new one only while fewer than ``max_num_seqs`` run. Returns the
    streams and, per step (each streams a chunk here), the prompt pieces it computed."""
    from specdec.plan.vllm.engine_trace import Stream

    n = len(arrivals)
    t, nxt, queue, running, truth = 0.0, 0, [], [], []
    done, chunks = [0] * n, [[] for _ in range(n)]
    while nxt < n or queue or running:
        if not queue and not running:
            t = max(t, arrivals[nxt])
        while nxt < n and arrivals[nxt] <= t:
            queue.append(nxt)
            nxt += 1
        left, seqs, step = engine.max_batched_tokens - len(running), len(running) + sum(done[i] > 0 for i in queue), []
        for i in queue:
            if left <= 0 or (not done[i] and seqs >= engine.max_num_seqs):
                break
            take = min(prompt_lens[i] - done[i], left)
            seqs += not done[i]
            step.append((i, take, done[i]))
            done[i] += take
            left -= take
        decode = [(1, prompt_lens[i] + len(chunks[i])) for i in running]
        t += cost.packed_step_time(decode + [(m, c) for _, m, c in step])
        completed = [i for i in queue if done[i] == prompt_lens[i]]
        assert running or completed, "a step that streams nothing cannot be seen; keep prompts under the budget"
        for i in running + completed:
            chunks[i].append(t)
        truth.append(step)
        queue = [i for i in queue if done[i] < prompt_lens[i]]
        running = [i for i in running + completed if len(chunks[i]) < output_len]
    return [Stream(a, p, c) for a, p, c in zip(arrivals, prompt_lens, chunks)], truth


def test_prompt_chunks_are_placed_in_the_steps_that_computed_them():
    """A chunking scheduler computes a long prompt over several steps, but the client sees the prompt
    only where its first token streams. Placed by replaying the scheduler, every chunk lands in its
    own step and the fit recovers the engine; placed whole in the first token's step (no limits
    given), the steps that carried hidden chunks look slow and the others fast, and the fit misses."""
    from specdec.plan.vllm.engine_trace import Engine, engine_steps, fit_trace, prefill_chunks, trace_samples

    truth_cost = StepCostModel(np.array([0.030, 0.002, 0.0015, 2e-6, 0.0, 0.0]))
    engine = Engine(max_num_seqs=8, max_batched_tokens=1024)
    rng = np.random.default_rng(5)
    prompts = rng.integers(50, 1000, 60).tolist()
    streams, truth = fake_chunking_engine(np.cumsum(rng.exponential(0.3, 60)), prompts, 24, truth_cost, engine)
    steps, at, _ = engine_steps(streams, gap=0.005)
    assert [sorted(p) for p in prefill_chunks(streams, steps, at, engine)] == [sorted(p) for p in truth]
    cut = sum(1 for step in truth for i, m, c in step if c + m < prompts[i])
    assert cut > 5  # prompts were computed in pieces
    placed = fit_trace(trace_samples(streams, gap=0.005, engine=engine))
    whole = fit_trace(trace_samples(streams, gap=0.005))
    probes = ([(1, 600)] * 6 + [(900, 0)], [(1, 300)] * 3 + [(400, 500)], [(1, 400)] * 8)
    for pieces in probes:
        assert placed.packed_step_time(pieces) == pytest.approx(truth_cost.packed_step_time(pieces), rel=0.03)
    assert max(abs(whole.packed_step_time(p) / truth_cost.packed_step_time(p) - 1) for p in probes) > 0.1


def test_a_trace_is_fitted_by_time_so_one_fast_prefill_does_not_hide_the_others():
    """A served trace: 400 decode steps and 40 prefills (a prompt's step costs 2.8 ms a token), one of
    them at a quarter of its work (a prompt whose prefix the engine had cached). Weighing each step
    alike, that one step pulls the prefill cost down and the trim then sets aside the real prefills as
    slow: the fit loses a fifth of the trace's time. Weighed by time it keeps the total within 5%."""
    from specdec.estimate.step_cost import StepSample, packed_features
    from specdec.plan.vllm.engine_trace import fit_trace

    rng = np.random.default_rng(0)

    def step(pieces, weights, seconds):
        return StepSample(tuple(packed_features(pieces, weights).tolist()), seconds)

    samples = [step([(1, 600.0)], [b], (0.045 + 0.006 * b) * (1 + 0.05 * rng.standard_normal()))
               for b in rng.integers(1, 17, 400)]
    samples += [step([(int(p), 0.0)], None, (0.045 + 0.0028 * p) * (1 + 0.05 * rng.standard_normal()))
                for p in rng.integers(60, 1400, 40)]
    samples.append(step([(830, 0.0)], None, (0.045 + 0.0028 * 830) / 4))

    def total(m):
        return sum(float(s.work() @ m.weights) for s in samples) / sum(s.seconds for s in samples)

    alike, timed = StepCostModel.fit(samples), fit_trace(samples)
    assert total(alike) < 0.85 and len(alike.outliers) > 10
    assert total(timed) == pytest.approx(1.0, abs=0.05) and timed.meta["by_time"] is True
    assert "by_time" not in alike.meta


def test_cluster_steps_never_puts_two_chunks_of_one_request_in_a_step():
    from specdec.plan.vllm.engine_trace import Stream, cluster_steps

    # a client that fell behind read request 0's chunks 5 ms apart; request 1's chunk came with the first
    s = [Stream(0.0, 10, [0.100, 0.105, 0.110]), Stream(0.0, 10, [0.101])]
    assert cluster_steps(s, gap=0.01) == [[(0, 0), (1, 0)], [(0, 1)], [(0, 2)]]
    assert len(cluster_steps(s, gap=0.0001)) == 4
    with pytest.raises(ValueError, match="gap must be > 0"):
        cluster_steps(s, gap=0.0)


def test_a_step_read_in_two_groups_is_one_step_and_a_late_read_is_untimed():
    from specdec.plan.vllm.engine_trace import Stream, cluster_steps, engine_steps

    # four requests decode together, a step every 0.1 s; the client read the step at 0.3 s in two
    # groups 20 ms apart (past the 12 ms gap), so clustering alone splits it into two half-steps
    times = [[0.1, 0.2, 0.3, 0.4, 0.5] for _ in range(4)]
    for i in (2, 3):
        times[i][2] += 0.02
    streams = [Stream(0.0, 10, t) for t in times]
    assert [len(c) for c in cluster_steps(streams, gap=0.012)] == [4, 4, 2, 2, 4, 4]
    steps, at, untimed = engine_steps(streams, gap=0.012)
    assert [len(c) for c in steps] == [4] * 5 and at == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert untimed == set()
    # one request read the step at 0.3 s only at 0.39 s: the same request twice in a row is no split
    late = [Stream(0.0, 10, [0.1, 0.2, 0.39, 0.4, 0.5])]
    steps, at, untimed = engine_steps(late, gap=0.005)
    assert len(steps) == 5
    assert untimed == {2, 3}  # the short interval's step and the long one's before it


def test_trace_samples_charge_drafting_rows_by_share_and_length():
    from specdec.plan.vllm.engine_trace import Stream, trace_samples

    # two requests decoding together for three steps of 0.1 s
    a = Stream(0.0, 50, [0.2, 0.3, 0.4, 0.5])
    b = Stream(0.0, 50, [0.2, 0.3, 0.4, 0.5])
    plain = trace_samples([a, b], gap=0.01)
    drafted = trace_samples([a, b], gap=0.01, draft_share=0.5, draft_len=3.0)
    assert [s.seconds for s in plain] == pytest.approx([0.1, 0.1, 0.1])
    # per step: 2 rows; plain 2 tokens, drafted 2 x (0.5 x 1 + 0.5 x 4) = 5 tokens and 1 drafting row
    assert plain[0].terms[2] == pytest.approx(2.0) and plain[0].terms[5] == 0.0
    assert drafted[0].terms[2] == pytest.approx(5.0) and drafted[0].terms[5] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="draft_len >= 1"):
        trace_samples([a, b], draft_share=0.5, draft_len=0.0)


def test_a_client_read_delay_is_dropped_not_fitted():
    from specdec.plan.vllm.engine_trace import Stream, trace_samples

    # steps every 0.1 s; the client read the step at 0.5 s only at 0.59 s, 10 ms before the next
    times = [0.1, 0.2, 0.3, 0.4, 0.59, 0.6, 0.7, 0.8]
    samples = trace_samples([Stream(0.0, 20, times)], gap=0.005)
    # the lone prefill (sent at 0, first chunk at 0.1), three steps, the two after the delay
    assert [round(s.seconds, 3) for s in samples] == [0.1] * 6
    assert samples[0].terms[2] == 20.0 and all(s.terms[2] == 1.0 for s in samples[1:])


def test_trace_inputs_and_packed_weights_are_refused_with_the_reason():
    from specdec.estimate.step_cost import packed_features
    from specdec.plan.vllm.engine_trace import Stream, trace_samples

    with pytest.raises(ValueError, match="one weight >= 0 per piece"):
        packed_features([(1, 10), (2, 10)], [1.0])
    with pytest.raises(ValueError, match="one weight >= 0 per piece"):
        packed_features([(1, 10)], [-1.0])
    with pytest.raises(ValueError, match="new tokens and context >= 0"):
        packed_features([(1, -3)])
    good = Stream(0.0, 10, [0.1, 0.2])
    with pytest.raises(ValueError, match="one entry per stream"):
        trace_samples([good], tokens_per_chunk=[1.0, 1.0])
    with pytest.raises(ValueError, match="first chunk at or after its send time"):
        trace_samples([Stream(0.5, 10, [0.1, 0.2])])
    with pytest.raises(ValueError, match="first chunk at or after its send time"):
        trace_samples([Stream(0.0, 10, [])])
