"""The one reader of Spec-Bench-format prompt files: selection and every bad-input error."""

import json

import pytest

from specdec.prompts import chat_ids, read_prompt_records


def write(tmp_path, lines):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def rec(qid, cat):
    return json.dumps({"question_id": qid, "category": cat, "turns": [f"q{qid}"]})


def test_selection_by_category_count_and_limit(tmp_path):
    p = write(tmp_path, [rec(1, "a"), rec(2, "b"), rec(3, "a"), "", rec(4, "a")])
    assert [r["question_id"] for r in read_prompt_records(p)] == [1, 2, 3, 4]
    assert [r["question_id"] for r in read_prompt_records(p, categories=["a"], per_category=2)] == [1, 3]
    assert [r["question_id"] for r in read_prompt_records(p, limit=2)] == [1, 2]


@pytest.mark.parametrize("lines, match", [
    (["{not json"], "not valid JSON"),
    ([json.dumps({"category": "a", "turns": []})], "non-empty 'turns'"),
    ([json.dumps({"turns": ["x"]})], "'category'"),
])
def test_bad_records(tmp_path, lines, match):
    with pytest.raises(ValueError, match=match):
        read_prompt_records(write(tmp_path, lines))


def test_missing_file_unknown_category_and_empty_selection(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_prompt_records(tmp_path / "nope.jsonl")
    p = write(tmp_path, [rec(1, "a")])
    with pytest.raises(ValueError, match=r"unknown categories \['z'\]"):
        read_prompt_records(p, categories=["z"])
    with pytest.raises(ValueError, match="no prompts selected"):
        read_prompt_records(p, per_category=0)


def test_chat_ids_without_template_uses_plain_tokenization():
    class Plain:
        chat_template = None

        def __call__(self, text):
            return {"input_ids": [len(text), 7]}

    assert chat_ids(Plain(), "abc") == [3, 7]
