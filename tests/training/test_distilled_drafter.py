"""Small distilled drafter: construction from target layers, training, artifact round trip and binding."""

import pytest
import torch
from feature_fixtures import synthetic_cache

from specdec.artifacts import IncompatibleArtifactError, save_artifact, tokenizer_fingerprint, TokenizerInfo
from specdec.models import tiny_model
from specdec.training.distilled_drafter import (DrafterTrainConfig, drafter_manifest, load_drafter, own_tensors,
                                      small_drafter, train_drafter)
from specdec.training.drafter_kd import train_drafter_kd


def _records(V, n=20, length=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(V, generator=g)
    out = []
    for i in range(n):
        x = [int(torch.randint(V, (1,), generator=g))]
        for _ in range(length - 1):
            x.append(int(perm[x[-1]]))
        out.append({"question_id": i, "category": "c", "prompt_ids": x[:4], "response_ids": x[4:]})
    return out


def test_drafter_trains_round_trips_and_is_bound_to_embeddings(tmp_path):
    target = tiny_model(seed=0, layers=3)
    drafter = small_drafter(target, 1)
    assert drafter.get_input_embeddings().weight is target.get_input_embeddings().weight
    assert all("embed_tokens" not in k and "lm_head" not in k for k in own_tensors(drafter))
    V = target.config.vocab_size
    report = train_drafter(drafter, _records(V), DrafterTrainConfig(num_layers=1, epochs=8, lr=2e-2, batch_size=8),
                           heldout_every=5, progress=False)
    assert report["heldout"]["loss"] < report["heldout_before"]["loss"] / 2, report
    assert report["heldout"]["top1"] > 0.8
    tok = TokenizerInfo({f"t{i}": i for i in range(V)}, {})
    m = drafter_manifest(drafter, target, tokenizer_fingerprint(tok), report, "tiny-drafter")
    save_artifact(str(tmp_path), own_tensors(drafter), m)
    loaded, manifest = load_drafter(str(tmp_path), target)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    torch.testing.assert_close(loaded(ids).logits, drafter(ids).logits)
    assert manifest.bound_to == "tokenizer"
    other = tiny_model(seed=1, layers=3)
    with pytest.raises(IncompatibleArtifactError, match="embeddings"):
        load_drafter(str(tmp_path), other)
    with pytest.warns(RuntimeWarning):
        load_drafter(str(tmp_path), other, allow_mismatch=True)


def test_shared_tensors_are_not_trained():
    target = tiny_model(seed=0, layers=2)
    before = target.get_input_embeddings().weight.clone()
    drafter = small_drafter(target, 1)
    train_drafter(drafter, _records(target.config.vocab_size, n=10), DrafterTrainConfig(num_layers=1, epochs=1),
                  heldout_every=5, progress=False)
    assert torch.equal(target.get_input_embeddings().weight, before)
    with pytest.raises(ValueError, match="num_layers"):
        small_drafter(target, 3)


def test_kd_training_learns_the_cached_distributions():
    """train_drafter_kd on a learnable cache (the target's next-token law puts 0.7 on a fixed
    permutation of the last token): held-out KD loss falls and top-1 agreement with the target's
    argmax rises, against the same drafter before training; the shared tensors stay frozen."""
    target = tiny_model(seed=0, layers=3)
    embed = target.get_input_embeddings().weight.clone()
    data, _ = synthetic_cache(V=target.config.vocab_size, H=target.config.hidden_size)
    drafter = small_drafter(target, 1)
    report = train_drafter_kd(drafter, data, DrafterTrainConfig(num_layers=1, epochs=8, lr=2e-2), heldout_every=5,
                              batch_tokens=256, progress=False)
    before, after = report["heldout_before"], report["heldout"]
    assert after["positions"] == before["positions"] > 0
    assert after["kd_ce"] < 0.6 * before["kd_ce"], (before, after)  # 0.3 of each label is on random tokens
    assert after["top1"] > max(0.9, before["top1"]), (before, after)
    assert torch.equal(target.get_input_embeddings().weight, embed)
