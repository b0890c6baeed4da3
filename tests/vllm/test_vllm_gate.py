"""The load gate inside the drafter: above its threshold vLLM gets no drafts at all; below, it drafts."""

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
