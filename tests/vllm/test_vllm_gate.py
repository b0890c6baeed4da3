"""The load gate inside the drafter, and the config's batch-size schedule it applies: above the threshold
(or where the table says 0) vLLM gets no drafts at all; below, it drafts."""

import pytest

from engines import engine, greedy, metric, spec_config, tiny_llama, token_prompts

VOCAB = 256


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "llama", vocab=VOCAB)


def test_above_gate_threshold_no_drafts_below_drafts(tiny):
    crowd = token_prompts(8, vocab=VOCAB, seed=3)  # 8 running together the whole time: batch 8 > 3
    pair = token_prompts(2, vocab=VOCAB, seed=4)   # batch 2 <= 3
    with engine(tiny, speculative=None) as llm:
        want_crowd, want_pair = greedy(llm, crowd, 40), greedy(llm, pair, 40)
    with engine(tiny, speculative=spec_config(3), options={"gate_off_above": 3, "log_every": 0}) as llm:
        got_crowd = greedy(llm, crowd, 40)
        crowd_drafts = metric(llm, "vllm:spec_decode_num_draft_tokens")
        gated = metric(llm, "vllm:specdec_steps", decision="gate_off")
        got_pair = greedy(llm, pair, 40)
        pair_drafts = metric(llm, "vllm:spec_decode_num_draft_tokens") - crowd_drafts
        drafting = metric(llm, "vllm:specdec_steps", decision="draft")
    assert got_crowd == want_crowd and got_pair == want_pair
    assert gated >= 39, f"only {gated} steps were gated off"
    assert crowd_drafts == 0, f"{crowd_drafts} draft tokens verified while the batch was above the gate"
    assert pair_drafts > 0 and drafting > 0


def test_a_batch_size_schedule_in_the_config_is_applied_by_the_drafter(tiny):
    """vLLM 0.32 does not apply num_speculative_tokens_per_batch_size to custom_class; specdec's drafter
    reads it from the config: K = 3 up to 3 running requests, none above, exact throughout."""
    crowd = token_prompts(8, vocab=VOCAB, seed=3)
    pair = token_prompts(2, vocab=VOCAB, seed=4)
    scheduled = {**spec_config(3), "num_speculative_tokens_per_batch_size": [[1, 3, 3], [4, 16, 0]]}
    with engine(tiny, speculative=None) as llm:
        want_crowd, want_pair = greedy(llm, crowd, 40), greedy(llm, pair, 40)
    with engine(tiny, speculative=scheduled, options={"log_every": 0}) as llm:
        got_crowd = greedy(llm, crowd, 40)
        crowd_drafts = metric(llm, "vllm:spec_decode_num_draft_tokens")
        gated = metric(llm, "vllm:specdec_steps", decision="gate_off")
        got_pair = greedy(llm, pair, 40)
        pair_drafts = metric(llm, "vllm:spec_decode_num_draft_tokens") - crowd_drafts
    assert got_crowd == want_crowd and got_pair == want_pair
    assert gated >= 39, f"only {gated} steps had no drafts at 8 running requests"
    assert crowd_drafts == 0, f"{crowd_drafts} draft tokens verified at 8 running requests (the table says 0)"
    assert pair_drafts > 0
