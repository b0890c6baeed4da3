"""Online teacher features (`specdec.training.online`, `specdec train online`): the drafters learn from
target forwards computed batch by batch, with no feature cache."""

import json

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from specdec import SpeculativeDecoder
from specdec.cli import main as cli_main
from specdec.models import tiny_model
from specdec.proposers.eagle import EagleProposer
from specdec.proposers.heads import MedusaProposer
from specdec.training.data import greedy_responses
from specdec.training.eagle3 import Eagle3TrainConfig
from specdec.training.features import FeatureSpec, TeacherSequence, extract_one
from specdec.training.medusa import HeadsTrainConfig
from specdec.training.online import (OnlineConfig, heldout_features, length_groups, plan_steps, split_sequences,
                                     target_batch, train_online)
from specdec.training.prompt_ids import read_prompt_ids, write_prompt_ids
from specdec.training.sources import selfdistill_sequences

pytestmark = pytest.mark.usefixtures("one_thread")
CHAT = ("{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<s> assistant {% endif %}")
SPEC = FeatureSpec((1, 2, 3), top_k=8, max_len=64)


def target():
    """A 4-layer random llama over 64 tokens, wide enough (64) that its greedy answers are a
    learnable function of the context."""
    return tiny_model(seed=11, layers=4, vocab_size=64, hidden_size=64)


def selfdistilled(model, n=160, prompt_len=8, answer=20):
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, 64, (prompt_len,), generator=g).tolist() for _ in range(n)]
    outs = greedy_responses(model, prompts, answer, None, 64)
    recs = [{"prompt_ids": p, "response_ids": r} for p, r in zip(prompts, outs)]
    return selfdistill_sequences(recs, SPEC.max_len, heldout_every=n + 1)[0]


def test_online_batch_equals_the_cached_features_of_each_sequence():
    model = target()
    seqs = [TeacherSequence([3, 9, 4, 17, 22, 5, 8], [False, False, False, True, True, True, True]),
            TeacherSequence([7, 1, 30, 2], [False, True, True, True]),
            TeacherSequence([5, 5, 6, 40, 41, 42, 43, 44, 45, 46], [False] * 4 + [True] * 6)]
    fb = target_batch(model, seqs, SPEC, head_chunk=5)  # chunked LM head: rows across chunk edges
    for b, s in enumerate(seqs):
        n = len(s.ids)
        cached = extract_one(model, s.ids, SPEC, "cpu")
        torch.testing.assert_close(fb.fused[b, :n].half(), cached["fused"], rtol=0, atol=2e-3)
        torch.testing.assert_close(fb.final[b, :n].half(), cached["final"], rtol=0, atol=2e-3)
        assert torch.equal(fb.topk_ids[b, :n].int(), cached["topk_ids"])
        torch.testing.assert_close(fb.topk_p[b, :n].half(), cached["topk_p"], rtol=0, atol=1e-3)
        assert fb.tokens[b, :n].tolist() == s.ids
        assert fb.assistant[b, :n].tolist() == s.assistant[1:] + [False]  # the cache's loss positions
        assert not fb.assistant[b, n:].any()  # padding never counts


def test_the_stream_plans_token_passes_in_bounded_batches():
    lengths = [5, 60, 12, 12, 33, 7, 64, 9]
    groups = length_groups(lengths, 64)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(max(lengths[i] for i in g) * len(g) <= 64 for g in groups)
    cfg = OnlineConfig(batch_tokens=64, train_tokens=500)
    plan = plan_steps(lengths, cfg)
    passes = sum(lengths[i] for g in plan for i in g)
    assert 500 <= passes < 500 + 64 and len({tuple(g) for g in plan}) == len(groups)  # ~2.5 epochs of the groups
    assert sum(lengths[i] for g in plan_steps(lengths, OnlineConfig(batch_tokens=64)) for i in g) == sum(lengths)
    seqs = [TeacherSequence([1] * n, [True] * n) for n in lengths]
    train, held = split_sequences(seqs, OnlineConfig(heldout_every=4, heldout_tokens=70))
    assert [len(s.ids) for s in held] == [12, 9] and [len(s.ids) for s in train] == [5, 60, 12, 33, 7, 64]
    _, held = split_sequences(seqs, OnlineConfig(heldout_every=4, heldout_tokens=15))
    assert [len(s.ids) for s in held] == [12]  # the second held-out sequence would pass 15 tokens


def test_drafters_learn_from_online_features():
    """Held-out loss falls and top-1 rises for both drafters, trained jointly on one stream."""
    model = target()
    cfg = OnlineConfig(batch_tokens=512, train_tokens=60_000, heldout_every=5, heldout_tokens=5000)
    train, held = split_sequences(selfdistilled(model), cfg)
    res = train_online(model, train, held, SPEC, cfg,
                       eagle3=Eagle3TrainConfig(reduced_vocab=0, steps=2, batch_tokens=512, lr=3e-3, warmup=5),
                       medusa=HeadsTrainConfig(num_heads=2, reduced_vocab=0, lr=1e-2), progress=False)
    stream = res["stream"]
    assert stream["stopped"] == "planned tokens done" and stream["token_passes"] >= 60_000
    assert stream["epochs"] > 10 and stream["heldout_sequences"] == 32
    e3 = res["eagle3"][1]
    before, after = e3["heldout_before"], e3["heldout"]
    assert after["ce"][0] < 0.8 * before["ce"][0] and after["ce"][1] < 0.8 * before["ce"][1], (before, after)
    assert after["top1"][0] > before["top1"][0] + 0.3 and after["top1"][1] > before["top1"][1] + 0.2, (before, after)
    assert after["chain_accepted"] > before["chain_accepted"] + 0.3
    md = res["medusa"][1]
    before, after = md["heldout_before"], md["heldout"]
    assert after["ce"][0] < before["ce"][0] - 0.15 and after["ce"][1] < before["ce"][1] - 0.1, (before, after)
    assert after["top1"][0] > before["top1"][0] + 0.05 and after["greedy_windows"][0] > 500, (before, after)


def test_a_deadline_stops_the_stream_and_says_so():
    model = target()
    cfg = OnlineConfig(batch_tokens=256, train_tokens=10**7, seconds=1e-6, heldout_every=5)
    train, held = split_sequences(selfdistilled(model, n=20), cfg)
    res = train_online(model, train, held, SPEC, cfg, medusa=HeadsTrainConfig(num_heads=1, reduced_vocab=0),
                       progress=False)
    assert res["stream"]["stopped"] == "seconds" and res["stream"]["steps"] < res["stream"]["planned_steps"]
    with pytest.raises(ValueError, match="eagle3 and/or medusa"):
        train_online(model, train, held, SPEC, cfg)


def test_heldout_features_form_a_feature_set():
    model = target()
    seqs = selfdistilled(model, n=6)
    data = heldout_features(model, seqs, SPEC, batch_tokens=64)
    assert data.num_sequences == 6 and data.fused.dtype == torch.float16
    assert sorted(data.span(i)[1] - data.span(i)[0] for i in range(6)) == sorted(len(s.ids) for s in seqs)


def test_prompt_id_files_round_trip_and_refuse_what_they_are_not(tmp_path):
    prompts = [[1, 2, 3], [70000, 5], [9]]
    meta = write_prompt_ids(tmp_path / "p.npz", prompts, {"tokenizer": "x"})
    got, meta2 = read_prompt_ids(tmp_path / "p.npz")
    assert got == prompts and meta2 == meta and meta["tokens"] == 6
    small = write_prompt_ids(tmp_path / "s.npz", [[1, 2], [3]], {})
    with np.load(tmp_path / "s.npz") as z:
        assert z["ids"].dtype == np.uint16 and small["prompts"] == 2
    with pytest.raises(ValueError, match="empty"):
        write_prompt_ids(tmp_path / "e.npz", [[1], []], {})
    np.savez(tmp_path / "bad.npz", ids=np.arange(3))
    with pytest.raises(ValueError, match="not a prompt-id file"):
        read_prompt_ids(tmp_path / "bad.npz")
    with pytest.raises(FileNotFoundError):
        read_prompt_ids(tmp_path / "missing.npz")


def word_target(tmp_path):
    words = [f"w{i}" for i in range(60)] + ["<s>", "</s>", "user", "assistant"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="</s>")
    fast.chat_template = CHAT
    model = target()
    model.save_pretrained(tmp_path / "t")
    fast.save_pretrained(tmp_path / "t")
    return model


def test_train_online_cli_writes_fp16_artifacts_that_decode_exactly(tmp_path, capsys):
    model = word_target(tmp_path)
    g = torch.Generator().manual_seed(3)
    write_prompt_ids(tmp_path / "p.npz", [torch.randint(0, 60, (6,), generator=g).tolist() for _ in range(40)],
                     {"tokenizer": "words"})
    argv = ["train", "online", "--target", str(tmp_path / "t"), "--device", "cpu", "--prompt-ids",
            str(tmp_path / "p.npz"), "--max-new-tokens", "12", "--gen-batch", "16", "--max-len", "64", "--layers",
            "1,2,3", "--top-k", "8", "--batch-tokens", "256", "--train-tokens", "3000", "--heldout-every", "5",
            "--vocab", "32", "--steps", "2", "--heads", "2", "--medusa-vocab", "0", "--max-depth", "3",
            "--eagle3-out", str(tmp_path / "e3"), "--medusa-out", str(tmp_path / "md"),
            "--report", str(tmp_path / "r.json"), "--no-progress"]
    assert cli_main(argv) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["data"]["answers"] == 40 and report["stream"]["token_passes"] >= 3000
    assert report["data"]["prompt_ids"] == "p.npz" and report["data"]["tokenizer"] == "words"
    e3 = json.loads((tmp_path / "e3" / "manifest.json").read_text())
    assert e3["config"]["architecture"] == "eagle3" and e3["config"]["reduced_vocab"] == 32
    assert e3["training"]["online"]["feature_spec"]["layers"] == [1, 2, 3]
    from safetensors.torch import load_file

    for folder in ("e3", "md"):
        tensors = load_file(str(tmp_path / folder / "weights.safetensors"))
        assert all(t.dtype == torch.float16 for t in tensors.values() if t.is_floating_point())
    prompt = [3, 9, 4, 17, 22, 5]
    plain = SpeculativeDecoder(model).generate(prompt, 12).tokens
    eagle = EagleProposer.load(str(tmp_path / "e3"), model)
    medusa = MedusaProposer.load(str(tmp_path / "md"), model)
    assert eagle.target_layers == (1, 2, 3)
    for prop in (eagle, medusa):
        out = SpeculativeDecoder(model, prop, budget=4).generate(prompt, 12)
        assert out.tokens == plain
        assert out.metrics.accepted > 0 and out.metrics.steps < len(plain), (type(prop).__name__, out.metrics.summary())


def test_train_online_cli_streams_sharegpt_conversations(tmp_path):
    word_target(tmp_path)
    g = torch.Generator().manual_seed(1)
    recs = []
    for i in range(30):
        words = [f"w{int(x)}" for x in torch.randint(1, 60, (14,), generator=g)]
        recs.append({"id": str(i), "conversations": [{"from": "human", "value": " ".join(words[:4])},
                                                     {"from": "gpt", "value": " ".join(words[4:])}]})
    (tmp_path / "sg.json").write_text(json.dumps(recs))
    argv = ["train", "online", "--source", "sharegpt", "--sharegpt", str(tmp_path / "sg.json"), "--target",
            str(tmp_path / "t"), "--device", "cpu", "--max-len", "32", "--layers", "1,2,3", "--top-k", "4",
            "--batch-tokens", "128", "--heldout-every", "5", "--heads", "2", "--medusa-vocab", "0",
            "--medusa-out", str(tmp_path / "md"), "--report", str(tmp_path / "r.json"), "--no-progress"]
    assert cli_main(argv) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["data"]["sequences"] == 30 and report["stream"]["train_sequences"] == 24
    assert report["stream"]["epochs"] == 1.0 and "eagle3" not in report  # one epoch, only what was asked
    manifest = json.loads((tmp_path / "md" / "manifest.json").read_text())
    assert manifest["kind"] == "medusa" and manifest["training"]["data"]["source"] == "sharegpt"


@pytest.mark.parametrize("extra, message", [
    ([], "at least one artifact"),
    (["--eagle3-out", "X"], "exactly one of --prompt-ids"),
    (["--eagle3-out", "X", "--prompt-ids", "/nope.npz"], "no such file"),
    (["--eagle3-out", "X", "--source", "sharegpt", "--prompts", "p.jsonl"], "belong to --source selfdistill"),
    (["--eagle3-out", "X", "--prompts", "P", "--dtype", "int8"], "--dtype must be"),
    (["--eagle3-out", "X", "--prompts", "P", "--batch-tokens", "0"], "--batch-tokens must be >= 1"),
    (["--eagle3-out", "X", "--prompts", "P", "--gen-seconds", "0"], "--gen-seconds must be > 0"),
])
def test_bad_flags_are_refused_before_the_model_loads(tmp_path, capsys, extra, message):
    (tmp_path / "P").write_text("")
    argv = ["train", "online", "--target", str(tmp_path / "missing-model")]
    argv += [a if a != "P" else str(tmp_path / "P") for a in extra]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "missing-model" not in err
