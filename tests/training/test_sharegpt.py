"""ShareGPT reading (truncation-aware, record by record) and chat-template assistant masks."""

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specdec.training.sharegpt import encode_conversation, read_sharegpt
from specdec.training.sources import selfdistill_sequences, sharegpt_sequences

CHAT = ("{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<s> assistant {% endif %}")


def word_tokenizer():
    """Whitespace word-level tokenizer over ``w0..w59`` plus chat markers, with a ChatML-like template."""
    words = [f"w{i}" for i in range(60)] + ["<s>", "</s>", "user", "assistant"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0")
    fast.chat_template = CHAT
    return fast


def conv(i, turns):
    return {"id": f"c{i}", "conversations": [{"from": f, "value": v} for f, v in turns]}


def write(path, records, cut: int | None = None):
    text = json.dumps(records, indent=2)
    if cut is not None:
        text = text[:cut]
    path.write_text(text)
    return text


def test_reads_every_complete_record_before_the_cut_and_says_so(tmp_path):
    recs = [conv(i, [("human", f"w{i} w2"), ("gpt", f"w{i + 1} w3 w4")]) for i in range(5)]
    text = json.dumps(recs, indent=2)
    cut = text.index('"c4"') + 10  # inside the last record
    write(tmp_path / "s.json", recs, cut)
    read = read_sharegpt(tmp_path / "s.json")
    assert read.truncated and read.records == 4 and len(read.conversations) == 4
    assert read.cut_at is not None and "truncated" in read.summary() and "4 complete" in read.summary()
    assert read.conversations[1]["messages"] == [{"role": "user", "content": "w1 w2"},
                                                 {"role": "assistant", "content": "w2 w3 w4"}]
    write(tmp_path / "full.json", recs)
    full = read_sharegpt(tmp_path / "full.json")
    assert not full.truncated and full.records == 5 and "complete" in full.summary()
    assert len(read_sharegpt(tmp_path / "full.json", limit=2).conversations) == 2


def test_corruption_before_the_end_raises_and_skips_are_counted(tmp_path):
    recs = [conv(0, [("human", "w1")]), {"id": "x", "conversations": []}, conv(2, [("robot", "w1"), ("gpt", "w2")]),
            conv(3, [("human", "w1"), ("gpt", "w2")])]
    write(tmp_path / "s.json", recs)
    read = read_sharegpt(tmp_path / "s.json")
    assert len(read.conversations) == 1 and read.records == 4
    assert read.skipped == {"no assistant text": 1, "no conversations list": 1, "unknown speaker 'robot'": 1}
    bad = json.dumps(recs).replace('"w2"}]}, {"id": "c3"', '"w2"}]} {"id": "c3"')
    (tmp_path / "bad.json").write_text(bad)
    with pytest.raises(ValueError, match="expected ',' or ']'"):
        read_sharegpt(tmp_path / "bad.json")
    (tmp_path / "mid.json").write_text('[{"id": 1, "conversations": [}, {"id": 2}]')
    with pytest.raises(ValueError, match="not valid JSON .* the file goes on"):
        read_sharegpt(tmp_path / "mid.json")
    (tmp_path / "obj.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="JSON array"):
        read_sharegpt(tmp_path / "obj.json")


def test_assistant_mask_covers_assistant_turns_only_and_max_len_cuts():
    tok = word_tokenizer()
    msgs = [{"role": "user", "content": "w1 w2"}, {"role": "assistant", "content": "w3 w4 w5"},
            {"role": "user", "content": "w6"}, {"role": "assistant", "content": "w7"}]
    ids, assistant = encode_conversation(tok, msgs, 100)
    words = tok.convert_ids_to_tokens(ids)
    assert [w for w, a in zip(words, assistant) if a] == ["w3", "w4", "w5", "</s>", "w7", "</s>"]
    assert words[:4] == ["<s>", "user", "w1", "w2"]
    short, mask = encode_conversation(tok, msgs, 6)
    assert short == ids[:6] and mask == assistant[:6]


def test_sources_skip_what_cannot_train_and_hold_out_the_eval_records(tmp_path):
    tok = word_tokenizer()
    recs = [conv(i, [("human", "w1 " * 8), ("gpt", "w2 w3")]) for i in range(3)]
    write(tmp_path / "s.json", recs)
    seqs, read = sharegpt_sequences(tok, 6, str(tmp_path / "s.json"))
    assert seqs == [] and read.skipped["no assistant token within max_len"] == 3
    seqs, _ = sharegpt_sequences(tok, 64, str(tmp_path / "s.json"), max_tokens=1)
    assert len(seqs) == 1
    records = [{"prompt_ids": [1, 2, 3], "response_ids": [4, 5]} for _ in range(10)]
    seqs, used = selfdistill_sequences(records, 4, heldout_every=5)
    assert used == [0, 1, 2, 3, 5, 6, 7, 8]
    assert seqs[0].ids == [2, 3, 4, 5] and seqs[0].assistant == [False, False, True, True]
