"""specdec's suffix drafter inside vLLM's CPU engine: greedy outputs unchanged, drafts really accepted.

Reference: the same engine configuration without speculation. Runs under chunked prefill and a
KV cache small enough to force preemption (so rows move, are reused and requests come back).
"""

import pytest

from engines import engine, greedy, metric, smollm2_dir, spec_config, tiny_llama, token_prompts

VOCAB = 256


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "llama", vocab=VOCAB)


def test_tiny_llama_greedy_identical_and_drafts_accepted(tiny):
    prompts = token_prompts(24, vocab=VOCAB, seed=1)
    with engine(tiny, speculative=None) as llm:
        want = greedy(llm, prompts, 48)
    with engine(tiny, speculative=spec_config(3)) as llm:
        got = greedy(llm, prompts, 48)
        drafted = metric(llm, "vllm:spec_decode_num_draft_tokens")
        accepted = metric(llm, "vllm:spec_decode_num_accepted_tokens")
        ours = metric(llm, "vllm:specdec_accepted_tokens")
    mismatches = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
    assert not mismatches, f"greedy outputs differ on prompts {mismatches}"
    assert drafted > 100 and accepted > 0.2 * drafted, (drafted, accepted)
    assert ours > 0


def test_tiny_llama_exact_under_chunked_prefill_and_preemption(tiny):
    """A KV cache of 3-4 blocks of 128 tokens for 16 requests of ~150 tokens: vLLM preempts and recomputes;
    prefill is chunked (32 tokens a step)."""
    prompts = token_prompts(16, vocab=VOCAB, seed=2)
    with engine(tiny, speculative=None) as llm:
        want = greedy(llm, prompts, 120)
    with engine(tiny, speculative=spec_config(4), kv_cache_bytes=600 * 1024, max_num_batched_tokens=32,
                max_model_len=256) as llm:
        got = greedy(llm, prompts, 120)
        preempted = metric(llm, "vllm:num_preemptions")
        accepted = metric(llm, "vllm:spec_decode_num_accepted_tokens")
    assert got == want
    assert preempted > 0, "the KV cache was not small enough to force preemption"
    assert accepted > 0


@pytest.mark.slow
def test_smollm2_greedy_identical_on_20_dev_prompts():
    from specdec.prompts import encode_first_turn, read_prompt_records
    from transformers import AutoTokenizer

    folder = smollm2_dir()
    tok = AutoTokenizer.from_pretrained(folder)
    from importlib.resources import files

    records = read_prompt_records(str(files("specdec") / "data" / "prompts_dev_sample.jsonl"))[:20]
    prompts = [{"prompt_token_ids": encode_first_turn(tok, r)} for r in records]
    with engine(folder, speculative=None, tokenizer=True) as llm:
        want = greedy(llm, prompts, 64)
    with engine(folder, speculative=spec_config(4), tokenizer=True) as llm:
        got = greedy(llm, prompts, 64)
        accepted = metric(llm, "vllm:spec_decode_num_accepted_tokens")
    mismatches = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
    assert not mismatches, f"greedy outputs differ on dev prompts {mismatches}"
    assert accepted > 0
