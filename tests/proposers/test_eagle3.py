"""EAGLE-3 layer: training-time test equals drafting, fused features through HFTarget, exactness, training."""

import pytest
import torch

from specdec import Artifact, DraftTree, SpeculativeDecoder
from specdec.artifacts import target_fingerprint
from specdec.models import tiny_model
from specdec.proposers.eagle import EagleProposer
from specdec.proposers.eagle3_layer import Eagle3Config, Eagle3Layer
from specdec.verify.hf import HFTarget
from specdec.training.eagle3 import Eagle3TrainConfig, train_eagle3, unroll
from specdec.training.features import FeatureSpec, TeacherSequence, extract, load_features

LAYERS = (1, 3, 5)


def _target(seed=0):
    return tiny_model(seed=seed, layers=6)


def _layer(target, seed=0, std=0.3, vocab_ids=None):
    torch.manual_seed(seed)
    layer = Eagle3Layer(Eagle3Config.from_target(target.config, LAYERS), vocab_ids)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if "norm" not in name:
                p.normal_(0, std)
    return layer.eval()


def _proposer(target, layer, **kw):
    return EagleProposer(layer, target.get_input_embeddings().weight, target.get_output_embeddings().weight,
                         Artifact("eagle3", "target", target_fingerprint(target)), **kw)


def _fused(target, ids):
    with torch.no_grad():
        hs = target.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in LAYERS], -1)


def test_hftarget_hidden_layers_returns_the_chosen_states_concatenated():
    target = _target()
    ids = [3, 7, 9, 11]
    _, _, hidden = HFTarget(target, hidden_layers=LAYERS).prefill([ids])
    torch.testing.assert_close(hidden[0], _fused(target, ids))
    _, _, plain = HFTarget(target).prefill([ids])
    assert plain[0].shape == (4, target.config.hidden_size)
    with pytest.raises(ValueError, match="hidden_layers"):
        HFTarget(target, hidden_layers=(0, 99))


def test_training_time_test_is_what_drafting_computes():
    """Step j of the unrolled training pass at anchor t == the proposer's depth-(j-1) node drafted
    from a cache of the true features up to t: same outputs, so the same probabilities."""
    target = _target(1)
    layer = _layer(target, 2)
    prop = _proposer(target, layer, top_k=4, max_depth=4, min_prob=0.0)
    seq = [5, 9, 2, 14, 30, 7, 21, 40, 3, 11]
    fused = _fused(target, seq)
    with torch.no_grad():
        outs = unroll(layer, fused[None], torch.tensor([seq]), target.get_input_embeddings().weight, 3)
    rows = layer.lm_rows(target.get_output_embeddings().weight)
    for t in (2, 5):
        prop.begin(t, seq[: t + 2], target_hidden=fused[: t + 2])
        chain = DraftTree.chain(torch.tensor(seq[t + 2: t + 5]))
        got = prop._path_probs(prop._state(t), chain)
        want, cum = [], 1.0
        for j in range(3):
            with torch.no_grad():
                p = torch.softmax(layer.head_input(outs[j][0, t]) @ rows.T, -1)
            cum *= float(p[seq[t + 2 + j]])
            want.append(cum)
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-4, atol=1e-7)
        prop.end(t)


def test_eagle3_greedy_decoding_equals_plain_with_its_own_or_a_given_target():
    target = _target(3)
    layer = _layer(target, 4, std=0.5)
    prompt = [4, 8, 15, 16, 23, 42]
    plain = SpeculativeDecoder(target).generate(prompt, 24).tokens
    spec = SpeculativeDecoder(target, _proposer(target, layer, top_k=3, max_depth=3), budget=6)
    assert spec.target.hidden_layers == LAYERS
    out = spec.generate(prompt, 24)
    assert out.tokens == plain
    assert out.metrics.accepted > 0 and out.metrics.steps < len(plain)  # the layer's drafts were accepted
    given = HFTarget(target)  # e.g. the plain decoder's target, shared by a benchmark
    dec = SpeculativeDecoder(given, _proposer(target, layer, top_k=3, max_depth=3), budget=6)
    assert dec.target.hidden_layers == LAYERS and dec.target.model is target and given.hidden_layers is None
    out = dec.generate(prompt, 24)
    assert out.tokens == plain and out.metrics.accepted > 0


def test_eagle3_trains_on_cached_features_and_beats_its_initialisation(tmp_path):
    """A target-generated corpus (greedy continuations, so the target's argmax is learnable)
    extracted into the cache, then one short training run: held-out CE must fall at every step."""
    target = _target(5)
    g = torch.Generator().manual_seed(0)
    seqs = []
    with torch.no_grad():
        for _ in range(40):
            start = torch.randint(2, 64, (3,), generator=g)
            ids = target.generate(start[None], max_new_tokens=21, do_sample=False, pad_token_id=0)[0].tolist()
            seqs.append(TeacherSequence(ids, [False] * 3 + [True] * (len(ids) - 3)))
    spec = FeatureSpec(LAYERS, top_k=4, max_len=64)
    extract(target, seqs, str(tmp_path / "f"), spec, shard_tokens=300, progress=False)
    data = load_features(str(tmp_path / "f"))
    assert data.num_sequences == 40 and data.fused.dtype == torch.float16
    cfg = Eagle3TrainConfig(reduced_vocab=0, steps=3, epochs=6, lr=3e-3, batch_tokens=256, warmup=2)
    layer, report = train_eagle3(data, target.get_input_embeddings().weight, target.get_output_embeddings().weight,
                                 target.model.norm.weight, Eagle3Config.from_target(target.config, LAYERS), cfg,
                                 heldout_every=5, progress=False)
    before, after = report["heldout_before"], report["heldout"]
    assert all(a < b for a, b in zip(after["ce"], before["ce"])), (before, after)
    assert after["top1"][0] > before["top1"][0]
    assert report["train_tokens"] == sum(len(s.ids) for i, s in enumerate(seqs) if i % 5 != 4)


def test_extraction_is_refused_before_any_forward_when_its_shards_cannot_fit_on_disk(tmp_path, monkeypatch):
    """The byte count per token is what the shards take (checked against the files), and an extraction
    the disk cannot hold is refused up front with the --max-tokens that would fit."""
    import os
    import shutil
    from collections import namedtuple

    target = _target(5)
    seqs = [TeacherSequence(list(range(2, 2 + n)), [False] + [True] * (n - 1)) for n in (30, 40, 50)]
    spec = FeatureSpec(LAYERS, top_k=4, max_len=64)
    per = spec.bytes_per_token(target.config.hidden_size)
    extract(target, seqs, str(tmp_path / "ok"), spec, shard_tokens=10_000, progress=False)
    shard = [f for f in os.listdir(tmp_path / "ok") if f.startswith("shard-")]
    size = sum(os.path.getsize(tmp_path / "ok" / f) for f in shard)
    assert 120 * per <= size <= 120 * per + 4096  # the tensors, plus one safetensors header per shard

    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 100 * per, 100 * per))
    assert extract(target, seqs, str(tmp_path / "fits"), spec, progress=False, max_tokens=70)["tokens"] == 70
    calls = []
    monkeypatch.setattr(target.model, "forward", lambda *a, **k: calls.append(1))
    with pytest.raises(ValueError, match=r"extracting 120 more tokens .* pass max_tokens \(--max-tokens\) <= 100,"):
        extract(target, seqs, str(tmp_path / "full"), spec, progress=False)
    assert not calls
