"""Synthetic self-distillation data: prompts the target writes, its greedy answers, captured features."""

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specdec.models import tiny_model
from specdec.prompts import chat_ids
from specdec.training import synthetic as syn
from specdec.training.eagle1 import FullSequences

TEMPLATE = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
            "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")


def _tokenizer(vocab_size=64):
    vocab = {"<pad>": 0, "<|im_end|>": 1, "<|im_start|>": 2, "user": 3, "assistant": 4}
    vocab.update({f"w{i}": i for i in range(5, vocab_size)})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<pad>", pad_token="<pad>", eos_token="<|im_end|>",
                                  additional_special_tokens=["<|im_start|>"])
    tok.chat_template = TEMPLATE
    return tok


def _features(model, ids):
    with torch.no_grad():
        return model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]


def test_user_prefix_is_the_template_up_to_the_message():
    tok = _tokenizer()
    assert syn.user_prefix_ids(tok) == [2, 3]
    tok.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        syn.user_prefix_ids(tok)


def test_generate_batch_matches_single_prompt_greedy_and_teacher_forced_features():
    model = tiny_model(seed=3)
    prompts = [[5, 9, 12], [7, 30, 22, 41, 8, 16], [50]]  # ragged: left padding must not leak
    outs = syn.generate_batch(model, prompts, max_new_tokens=12, ends=[1], sample=None, pad_id=0)
    for p, (response, ended, hidden) in zip(prompts, outs):
        with torch.no_grad():
            ref = model.generate(
                torch.tensor([p]),
                attention_mask=torch.ones(1, len(p), dtype=torch.long),
                max_new_tokens=12,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=1,
            )[0, len(p) :].tolist()
        ref, ref_ended = syn._cut(ref, [1])
        assert (response, ended) == (ref, ref_ended)
        fed = p + response[:-1]
        assert hidden.shape == (len(fed), model.config.hidden_size)
        torch.testing.assert_close(hidden, _features(model, fed), atol=1e-4, rtol=1e-4)


def test_write_prompts_returns_distinct_ended_turns_reproducibly():
    model = tiny_model(seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()  # uniform next-token law: turns end by chance
    tok = _tokenizer()
    a = syn.write_prompts(model, tok, 5, seed=7, max_tokens=40, batch_size=8)
    b = syn.write_prompts(model, tok, 5, seed=7, max_tokens=40, batch_size=8)
    assert a == b and len(set(a)) == 5
    assert all(len(t) >= 8 and "<|im_end|>" not in t and "<|im_start|>" not in t for t in a)


def test_answer_records_are_greedy_answers_with_their_features(tmp_path):
    model = tiny_model(seed=3)
    tok = _tokenizer()
    texts = ["w5 w9 w12", "w7 w30 w22 w41 w8", "w50 w51"]
    data = syn.answer(model, tok, texts, max_new_tokens=10, batch_size=2)
    assert [r["text"] for r in data.records] == texts
    for i, rec in enumerate(data.records):
        assert rec["source"] == "synthetic" and rec["prompt_ids"] == chat_ids(tok, texts[i])
        out = syn.generate_batch(model, [rec["prompt_ids"]], max_new_tokens=10, ends=[1], sample=None, pad_id=1)[0]
        assert rec["response_ids"] == out[0][:-1]  # the last token has no feature and is dropped
        h, toks, P = data.sequence(i)
        assert toks.tolist() == rec["prompt_ids"] + rec["response_ids"] and P == len(rec["prompt_ids"])
        torch.testing.assert_close(h.float(), _features(model, toks.tolist()), atol=2e-2, rtol=2e-3)


def test_load_or_build_caches_by_fingerprint_and_seed(tmp_path):
    model = tiny_model(seed=0)
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()
    tok = _tokenizer()
    a, src = syn.load_or_build(
        model, tok, 3, target_fp="fp", seed=1, max_new_tokens=6, cache_dir=str(tmp_path), batch_size=4
    )
    b, src2 = syn.load_or_build(
        model, tok, 3, target_fp="fp", seed=1, max_new_tokens=6, cache_dir=str(tmp_path), batch_size=4
    )
    assert (src, src2) == ("generated", "cached")
    assert a.records == b.records and torch.equal(a.hidden, b.hidden) and torch.equal(a.offsets, b.offsets)


def _seqs(n, source=None, start=0):
    recs = [{"prompt_ids": [1, 2], "response_ids": [3], **({"source": source} if source else {})} for _ in range(n)]
    offsets = torch.arange(n + 1) * 3
    return FullSequences(
        recs, torch.full((3 * n, 4), float(start), dtype=torch.float16), torch.arange(3 * n) + start, offsets
    )


def test_medusa_rows_hold_out_prompt_records_only():
    from specdec.training.medusa import record_split_mask, rows_from_full

    data = rows_from_full(_seqs(10).extended(_seqs(10, "synthetic", start=100)))
    assert data.hidden.shape[0] == data.tokens.numel() == 20 * 2  # last prompt position + 1 response token
    held = record_split_mask(data, 5)
    assert sorted(set(data.record[held].tolist())) == [4, 9]  # not the synthetic records 14 and 19


def test_synthetic_records_extend_training_data_but_never_the_heldout_split():
    base = _seqs(20)
    both = base.extended(_seqs(15, "synthetic", start=100))
    assert base.heldout(10) == both.heldout(10) == [9, 19]
    assert len(both.records) == 35 and int(both.offsets[-1]) == both.tokens.numel() == 105
    h, toks, _ = both.sequence(20)
    assert toks.tolist() == [100, 101, 102] and float(h[0, 0]) == 100.0
    with pytest.raises(ValueError, match="only synthetic records"):
        base.extended(_seqs(2))


def test_train_commands_use_synthetic_records_and_keep_the_heldout_split(tmp_path, capsys):
    import json

    from specdec.artifacts import load_artifact
    from specdec.cli import main as train_main

    model = tiny_model(seed=0)
    model.save_pretrained(tmp_path / "t")
    _tokenizer().save_pretrained(tmp_path / "t")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"question_id": i, "category": "qa", "turns": [f"w{i + 5} w{i + 6} w9"]}) + "\n"
            for i in range(10)
        )
    )
    common = [
        "--target",
        str(tmp_path / "t"),
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        "6",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--heldout-every",
        "5",
        "--epochs",
        "1",
        "--device",
        "cpu",
        "--synthetic",
        "6",
        "--synthetic-batch",
        "8",
    ]
    assert train_main(["train", "eagle", "--out", str(tmp_path / "eagle"), "--vocab", "0"] + common) == 0
    assert (
        train_main(
            ["train", "heads", "--full", "--out", str(tmp_path / "heads"), "--vocab", "0", "--heads", "2"] + common
        )
        == 0
    )
    eagle = load_artifact(str(tmp_path / "eagle"))[1].training
    heads = load_artifact(str(tmp_path / "heads"))[1].training
    assert eagle["synthetic"]["source"] == "generated" and heads["synthetic"]["source"] == "cached"
    assert eagle["synthetic"]["records"] == heads["synthetic"]["records"] == 6
    assert eagle["records"] == 10 + eagle["synthetic"]["records"]
    # records 4 and 9 of the prompt file; synthetic record 14 sits in a held-out slot but trains
    assert eagle["heldout"]["records"] == 2
    assert train_main(["train", "draft", "--out", str(tmp_path / "draft"), "--layers", "1"] + common) == 0
    draft = load_artifact(str(tmp_path / "draft"), verify_weights=False)[1].training
    assert draft["synthetic"]["records"] == eagle["synthetic"]["records"]
    assert draft["heldout"]["tokens"] > 0 and draft["records"] == eagle["records"]
    capsys.readouterr()
    assert train_main(["train", "heads", "--out", str(tmp_path / "h2")] + common) == 2
    assert "--synthetic needs --full" in capsys.readouterr().err


def test_bad_synthetic_requests_and_caches_are_refused(tmp_path, capsys):
    from safetensors.torch import save_file

    from specdec.cli import main as train_main
    from specdec.training.data import save_records

    model, tok = tiny_model(seed=0), _tokenizer()
    with pytest.raises(ValueError, match="number of synthetic prompts must be >= 1, got 0"):
        syn.load_or_build(model, tok, 0, target_fp="fp", seed=0, max_new_tokens=4, cache_dir=str(tmp_path))
    stem = syn.cache_path(str(tmp_path), "fp", 2, 0, 4)
    save_records([{"prompt_ids": [1], "response_ids": [2]}], stem + ".jsonl")  # one record, offsets for two
    save_file(
        {"hidden": torch.zeros(3, 4), "tokens": torch.zeros(3, dtype=torch.long), "offsets": torch.tensor([0, 2, 3])},
        stem + "-full.safetensors",
    )
    with pytest.raises(ValueError, match="inconsistent .* delete both files to regenerate"):
        syn.load_or_build(model, tok, 2, target_fp="fp", seed=0, max_new_tokens=4, cache_dir=str(tmp_path))
    common = ["--prompts", "p.jsonl", "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit):  # argparse: --synthetic must be >= 0
        train_main(["train", "eagle", "--synthetic", "-1"] + common)
    capsys.readouterr()
    assert train_main(["train", "heads", "--full", "--max-tokens", "100"] + common) == 2
    assert "--full trains on every record; it cannot be combined with --max-tokens" in capsys.readouterr().err


def test_greedy_data_ignores_the_checkpoints_generation_defaults():
    """A checkpoint whose generation config carries a repetition penalty must still yield the
    target's argmax answers (what speculative decoding reproduces), in both data paths."""
    from specdec.engine.decoder import SpeculativeDecoder
    from specdec.training.data import greedy_responses

    model = tiny_model(seed=3)
    prompts = [[5, 9, 12], [7, 30, 22, 41, 8, 16]]
    plain = [SpeculativeDecoder(model).generate(p, 10, stop_tokens=[1]).tokens for p in prompts]
    model.generation_config.repetition_penalty = 50.0
    model.generation_config.no_repeat_ngram_size = 1
    assert greedy_responses(model, prompts, 10, eos_token_id=1) == plain
    outs = syn.generate_batch(model, prompts, max_new_tokens=10, ends=[1], sample=None, pad_id=0)
    assert [r for r, _, _ in outs] == plain


def test_cache_name_holds_a_non_default_batch_size():
    """The batch size changes the sampled prompts, so two batch sizes must not share a cache."""
    assert syn.cache_path("d", "fp", 8, 0, 16) == syn.cache_path("d", "fp", 8, 0, 16, syn.DEFAULT_BATCH)
    assert syn.cache_path("d", "fp", 8, 0, 16, 4) != syn.cache_path("d", "fp", 8, 0, 16)
