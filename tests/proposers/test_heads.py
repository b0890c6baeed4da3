"""Medusa heads: static tree, proposer state, training on synthetic data, artifact binding, exactness."""

import itertools
import math

import pytest
import torch
from feature_fixtures import synthetic_cache

from specdec.artifacts import IncompatibleArtifactError, Manifest, save_artifact, target_fingerprint
from specdec.models import tiny_model
from specdec.proposers.heads import MedusaHeads, MedusaProposer, static_tree
from specdec.training.data import SelfDistillation, select_by_budget
from specdec.training.eagle3 import split
from specdec.training.medusa import HeadsTrainConfig, evaluate, reduced_vocabulary, train_medusa
from specdec.training.medusa_kd import evaluate as evaluate_kd
from specdec.training.medusa_kd import train_medusa_kd


def test_static_tree_is_the_best_prefix_closed_set():
    acc = [[0.6, 0.2, 0.1], [0.5, 0.3, 0.1], [0.4, 0.2]]
    for budget in range(0, 12):
        tree = static_tree(acc, budget)
        assert len(tree) == min(budget, 3 + 9 + 18)
        assert all(p[:-1] in tree[: tree.index(p)] for p in tree if len(p) > 1), "parents must precede children"
        score = lambda p: math.prod(acc[d][r] for d, r in enumerate(p))
        every = [p for n in (1, 2, 3) for p in itertools.product(*[range(len(acc[d])) for d in range(n)])]
        best = sorted((score(p) for p in every), reverse=True)[:budget]
        assert sorted((score(p) for p in tree), reverse=True) == pytest.approx(best)
    with pytest.raises(ValueError):
        static_tree([], 3)


def test_untrained_heads_are_the_lm_head_and_reduced_vocab_maps_ids():
    torch.manual_seed(0)
    lm = torch.randn(40, 8)
    h = torch.randn(5, 8)
    heads = MedusaHeads(8, 3)
    torch.testing.assert_close(heads(h, lm), (h @ lm.T).expand(3, 5, 40))
    ids = torch.tensor([3, 7, 11, 20])
    small = MedusaHeads(8, 2, vocab_ids=ids)
    torch.testing.assert_close(small(h, lm), (h @ lm[ids].T).expand(2, 5, 4))
    assert small.token_ids(torch.tensor([0, 3])).tolist() == [3, 20]
    with pytest.raises(ValueError, match="distinct"):
        MedusaHeads(8, 2, vocab_ids=torch.tensor([1, 1]))
    assert reduced_vocabulary(torch.tensor([5, 5, 5, 2, 2, 9]), 2, 10).tolist() == [2, 5]
    assert reduced_vocabulary(torch.tensor([1]), 0, 10) is None


def _proposer(num_heads=3, H=8, V=40, seed=0):
    torch.manual_seed(seed)
    heads = MedusaHeads(H, num_heads)
    for p in heads.parameters():
        torch.nn.init.normal_(p, std=0.5)
    lm = torch.randn(V, H)
    acc = [[0.7, 0.2, 0.1]] * num_heads
    from specdec import Artifact

    return MedusaProposer(heads, lm, acc, Artifact("medusa", "target", "target-x")), heads, lm


def test_proposer_tree_tokens_are_head_topk_at_each_level():
    prop, heads, lm = _proposer()
    h = torch.randn(4, 8)
    prop.begin("r", [1, 2], target_hidden=h)
    prop.commit("r", [5, 6], target_hidden=torch.randn(2, 8))
    last = prop._hidden["r"]
    tree = prop.propose(["r"], 9)[0]
    top = torch.topk(heads(last[None], lm)[:, 0], 3, dim=-1).indices  # [k, 3]
    paths = static_tree(prop.rank_acc, 9)
    assert tree.num_nodes == 9 and bool(tree.deterministic.all())
    for i, p in enumerate(paths):
        assert int(tree.tokens[i]) == int(top[len(p) - 1, p[-1]])
        assert int(tree.depth[i]) == len(p)
    # After begin alone the next token is unknown: depth 1 is the LM head's own argmax.
    prop.begin("s", [3], target_hidden=h)
    t2 = prop.propose(["s"], 4)[0]
    assert int(t2.tokens[0]) == int((h[-1] @ lm.T).argmax()) and t2.root_children == [0]


def test_proposer_state_errors():
    prop, _, _ = _proposer()
    with pytest.raises(ValueError, match="needs target_hidden"):
        prop.begin("a", [1])
    prop.begin("a", [1], target_hidden=torch.randn(1, 8))
    with pytest.raises(ValueError, match="rows for"):
        prop.commit("a", [1, 2], target_hidden=torch.randn(1, 8))
    with pytest.raises(ValueError, match=r"\[n >= 1, 8\]"):
        prop.commit("a", [1], target_hidden=torch.randn(1, 9))
    with pytest.raises(KeyError):
        prop.propose(["zz"], 3)
    assert prop.propose(["a"], 0)[0].num_nodes == 0
    prop.end("a")
    assert prop.memory_bytes() == sum(p.numel() * 4 for p in prop.heads.parameters())


def _synthetic(n_records=30, length=20, V=24, H=32, seed=0):
    """Tokens follow a fixed permutation (x_{t+1} = perm[x_t]); h_t encodes x_t and x_{t+1}, so each
    head can learn x_{t+2+i} exactly."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(V, generator=g)
    emb = torch.randn(V, H, generator=g)
    toks, rec = [], []
    for r in range(n_records):
        x = [int(torch.randint(V, (1,), generator=g))]
        for _ in range(length - 1):
            x.append(int(perm[x[-1]]))
        toks += x
        rec += [r] * length
    tokens, record = torch.tensor(toks), torch.tensor(rec)
    nxt = torch.cat([tokens[1:], tokens[:1]])
    hidden = (emb[tokens] + emb[nxt]).half()
    records = [{"question_id": r, "category": "c", "prompt_ids": [0], "response_ids": [1]} for r in range(n_records)]
    return SelfDistillation(records, hidden, tokens, record), torch.randn(V, H, generator=g)


def test_training_learns_synthetic_future_tokens():
    data, lm = _synthetic()
    cfg = HeadsTrainConfig(num_heads=2, epochs=8, lr=2e-2, batch_size=64, reduced_vocab=0, max_rank=3)
    before = evaluate(MedusaHeads(lm.shape[1], 2), data, torch.arange(data.tokens.numel()), lm, 3)
    heads, report = train_medusa(data, lm, cfg, heldout_every=5, progress=False)
    held = report["heldout"]
    assert held["top1"][0] > 0.9 and held["top1"][1] > 0.9, held["top1"]
    assert held["loss"][0] < before["loss"][0] / 3
    assert len(held["rank_acc"]) == 2 and len(held["rank_acc"][0]) == 3
    assert report["train_rows"] > held["rows"] > 0


def test_kd_training_learns_the_cached_distributions():
    """train_medusa_kd on a learnable cache: held-out KD loss falls and top-1 rises for every head,
    against the untrained heads (the LM head) on the same held-out rows."""
    data, lm = synthetic_cache(V=24, H=32)
    cfg = HeadsTrainConfig(num_heads=2, epochs=12, lr=2e-2, batch_size=64, reduced_vocab=0, max_rank=3)
    _, held = split(data, 5)
    held_rows = torch.cat([torch.arange(*data.span(i)) for i in held])
    before = evaluate_kd(MedusaHeads(lm.shape[1], 2), data, held_rows, lm, 3)
    heads, report = train_medusa_kd(data, lm, cfg, heldout_every=5, progress=False)
    after = report["heldout"]
    assert after["positions"] == before["positions"] > 0 and min(after["greedy_windows"]) > 0
    for i in range(2):
        assert after["ce"][i] < before["ce"][i] / 2, (before, after)
        assert after["top1"][i] > max(0.9, before["top1"][i]), (before, after)
    assert report["train_rows"] > 0 and report["labels"] == "target top-k distribution (KD)"


def test_select_by_budget_keeps_shortest_in_order():
    recs = [{"prompt_ids": [0] * n, "response_ids": [1]} for n in (5, 1, 3, 9)]
    assert [len(r["prompt_ids"]) for r in select_by_budget(recs, 10)] == [1, 3]  # sizes 2 + 4; 6 more won't fit
    assert [len(r["prompt_ids"]) for r in select_by_budget(recs, 12)] == [5, 1, 3]
    with pytest.raises(ValueError, match="shortest"):
        select_by_budget(recs, 1)


def test_artifact_binding_refuses_other_checkpoint(tmp_path):
    target = tiny_model(seed=0)
    other = tiny_model(seed=1)
    H = target.config.hidden_size
    heads = MedusaHeads(H, 2, vocab_ids=torch.arange(10))
    manifest = Manifest(kind="medusa", name="m", bound_to="target", fingerprint=target_fingerprint(target),
                        config={"hidden_size": H, "num_heads": 2, "num_layers": 1, "rank_acc": [[0.5, 0.2]] * 2})
    save_artifact(str(tmp_path), heads.state_tensors(), manifest)
    prop = MedusaProposer.load(str(tmp_path), target)
    assert prop.artifact.bound_to == "target" and prop.artifact.fingerprint == manifest.fingerprint
    assert prop.heads.vocab_ids.tolist() == list(range(10))
    with pytest.raises(IncompatibleArtifactError, match="refit"):
        MedusaProposer.load(str(tmp_path), other)
    with pytest.warns(RuntimeWarning):
        MedusaProposer.load(str(tmp_path), other, allow_mismatch=True)


def test_greedy_decoding_with_heads_is_exact():
    from specdec.engine.decoder import SpeculativeDecoder

    target = tiny_model(seed=3)
    H = target.config.hidden_size
    torch.manual_seed(0)
    heads = MedusaHeads(H, 3)
    for p in heads.parameters():
        torch.nn.init.normal_(p, std=0.3)
    from specdec import Artifact

    prop = MedusaProposer(heads, target.get_output_embeddings().weight, [[0.6, 0.3]] * 3,
                          Artifact("medusa", "target", target_fingerprint(target)))
    prompt = [2, 5, 7, 11]
    ref = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 4, dtype=torch.long),
                          max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)[0, 4:].tolist()
    out = SpeculativeDecoder(target, prop, max_budget=8, budget=8).generate(prompt, 24)
    assert out.tokens == ref
    assert out.metrics.accepted > 0 and out.metrics.steps < len(ref)  # the heads' drafts were verified and accepted


def test_reduced_vocabulary_ids_must_lie_in_the_lm_head():
    with pytest.raises(ValueError, match="must be >= 0"):
        MedusaHeads(8, 1, vocab_ids=torch.tensor([3, -1]))
    heads = MedusaHeads(8, 1, vocab_ids=torch.tensor([3, 40]))
    with pytest.raises(ValueError, match="reach id 40 but the LM head has 40 rows"):
        heads.lm_rows(torch.zeros(40, 8))
