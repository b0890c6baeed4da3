"""The batch-size schedule as a controller: vLLM's table, composed with the other gates."""

import pytest

from specdec.control.batch_schedule import BatchSchedule, validate_schedule
from specdec.control.interface import BatchView, Capped, Outcome
from specdec.control.load_gate import LoadGate


def test_it_drafts_the_tables_k_at_the_running_batch_within_the_cap():
    s = BatchSchedule([(1, 2, 4), (3, 5, 2), (8, 16, 0)], 4)
    assert [s.decide(BatchView(b)).budget for b in (0, 1, 2, 3, 5, 6, 7, 8, 99)] == [4, 4, 4, 2, 2, 2, 2, 0, 0]
    assert s.decide(BatchView(1, cap=1)).budget == 1 and s.max_budget == 4
    off = s.decide(BatchView(9))
    assert not off.speculate and off.reason == "schedule: no drafts at 9 requests"
    assert BatchSchedule([(1, 4, 2), (5, 8, 0)], 4).max_budget == 2


def test_it_caps_an_inner_gate_and_stops_it_above_the_table():
    """Outermost, the table bounds the load gate's budget and turns it off where K = 0."""
    gate = LoadGate(off_above=float("inf"), budget=4)
    both = Capped(BatchSchedule([(1, 1, 3), (2, 64, 0)], 4), gate)
    assert both.decide(BatchView(1)).budget == 3
    assert both.decide(BatchView(2)).reason == "schedule: no drafts at 2 requests"
    both.observe(Outcome.of([0, 0], [0, 0], budget=0))
    assert both.decide(BatchView(1)).budget == 3


def test_the_table_is_read_after_sorting_and_refused_where_vllm_would():
    assert validate_schedule([[9, 16, 0], [1, 8, 2]], 2) == ((1, 8, 2), (9, 16, 0))
    with pytest.raises(ValueError, match="exceeds num_speculative_tokens 2"):
        BatchSchedule([(1, 8, 3)], 2)
    with pytest.raises(ValueError, match="must start at batch size 1"):
        validate_schedule([], 2)
