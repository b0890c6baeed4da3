"""DraftModelProposer: cache rollback, recorded q rows, tree drafting, tokenizer checks, memory."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specdec.artifacts import IncompatibleArtifactError, TokenizerInfo
from specdec.sampling.params import SamplingParams
from specdec.proposers.draft_model import DraftModelProposer

V = 48
TOK = TokenizerInfo(vocab={f"t{i}": i for i in range(V)}, special={"eos_token": "t0"})


def tiny(seed, layers=2):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def drafter():
    return tiny(1)


def make(drafter, **kw):
    return DraftModelProposer(drafter, target_tokenizer=TOK, draft_tokenizer=TOK, **kw)


@torch.no_grad()
def fresh(model, ids):
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    return out.logits[0].float(), out.past_key_values


def assert_cache_matches_fresh(p, req, drafter):
    r = p._requests[req]
    n = len(r.committed)
    logits, cache = fresh(drafter, r.committed)
    assert r.n_cached == n and r.cache.get_seq_length() >= n
    for mine, ref in zip(r.cache.layers, cache.layers):
        torch.testing.assert_close(mine.keys[:, :, :n], ref.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mine.values[:, :, :n], ref.values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(r.root_logits, logits[-1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("mode", ["greedy", "sample", "tree"])
def test_cache_after_commit_equals_fresh_prefill(drafter, mode):
    kw = {"generator": torch.Generator().manual_seed(0), "sampling": SamplingParams(1.0)} if mode == "sample" else {}
    p = make(drafter, mode=mode, **kw)
    p.begin("a", [1, 2, 3, 4])
    rng = torch.Generator().manual_seed(5)
    for step in range(6):
        tree = p.propose(["a"], 4)[0]
        assert_cache_matches_fresh(p, "a", drafter)  # propose leaves the committed part intact
        p.propose(["a"], 4)  # proposing twice without a commit must not corrupt anything
        path = tree.paths[0] if tree.num_nodes else []
        n_acc = step % (len(path) + 1)
        accepted = [int(tree.tokens[i]) for i in path[:n_acc]]
        bonus = int(torch.randint(V, (1,), generator=rng))
        p.commit("a", accepted + [bonus])
        p.propose(["a"], 2)
        assert_cache_matches_fresh(p, "a", drafter)
    p.end("a")
    with pytest.raises(KeyError):
        p.propose(["a"], 2)


def test_sampled_q_rows_are_the_distribution_sampled_from(drafter):
    sp = SamplingParams(temperature=0.7, top_k=20, top_p=0.9)
    p = make(drafter, mode="sample", sampling=sp, generator=torch.Generator().manual_seed(3))
    prompt = [5, 6, 7]
    p.begin(0, prompt)
    tree = p.propose([0], 5)[0]
    assert tree.num_nodes == 5 and tree.is_chain and not bool(tree.deterministic.any())
    toks = tree.tokens.tolist()
    for i in range(5):
        logits, _ = fresh(drafter, prompt + toks[:i])
        q = sp.process(logits[-1])
        torch.testing.assert_close(tree.draft_probs[i], q, atol=1e-5, rtol=1e-4)
        assert abs(float(tree.draft_probs[i].sum()) - 1) < 1e-5
        assert int((tree.draft_probs[i] > 0).sum()) <= 20
        assert float(tree.draft_probs[i, toks[i]]) > 0


def test_tree_nodes_are_topk_of_the_fresh_distribution_after_their_parent(drafter):
    p = make(drafter, mode="tree", width=3)
    prompt = [9, 8, 7, 6]
    p.begin("t", prompt)
    tree = p.propose(["t"], 12)[0]
    assert 0 < tree.num_nodes <= 12 and tree.max_depth >= 2 and bool(tree.deterministic.all())
    toks = tree.tokens.tolist()
    for i in range(tree.num_nodes):
        ctx = prompt + [toks[j] for j in tree.path_to(i)[:-1]]
        logits, _ = fresh(drafter, ctx)
        assert toks[i] in torch.topk(logits[-1], 3).indices.tolist(), f"node {i} is not in the parent's top-3"
    # The greedy chain of depth max_depth is a path of the tree (highest path score at every level
    # is not guaranteed, but the first root child is always the argmax).
    assert toks[tree.root_children[0]] == int(fresh(drafter, prompt)[0][-1].argmax())


def test_tree_level_logits_equal_fresh_forward_over_each_path(drafter, monkeypatch):
    """The 4-D mask + positions of a tree level must reproduce a plain forward over each node's path."""
    p = make(drafter, mode="tree", width=3)
    prompt = [11, 12, 13]
    calls = []
    real = p._forward

    def spy(r, ids, positions, mask=None):
        logits = real(r, ids, positions, mask)
        calls.append((list(ids), list(positions), None if mask is None else mask.clone(), logits))
        return logits

    monkeypatch.setattr(p, "_forward", spy)
    p.begin(0, prompt)
    p.propose([0], 10)
    fed = []
    base = len(prompt)
    tree_calls = [c for c in calls if c[2] is not None]
    assert len(tree_calls) >= 2
    for ids, positions, mask, logits in tree_calls:
        fed += ids
        for j in range(len(ids)):
            visible = (mask[0, 0, j] == 0).nonzero().flatten().tolist()
            assert visible[:base] == list(range(base))
            path = [fed[s - base] for s in visible[base:]]
            assert path[-1] == ids[j] and positions[j] == base + len(path) - 1
            torch.testing.assert_close(logits[j], fresh(drafter, prompt + path)[0][-1], atol=1e-4, rtol=1e-4)


def test_greedy_speculation_reproduces_target_greedy(drafter):
    target = tiny(2)
    prompt, n_new = [3, 1, 4, 1, 5], 20
    ids = list(prompt)
    for _ in range(n_new):
        ids.append(int(fresh(target, ids)[0][-1].argmax()))
    want = ids[len(prompt):]
    for mode, kw in [("greedy", {}), ("tree", {"width": 2})]:
        p = make(drafter, mode=mode, **kw)
        p.begin(0, prompt)
        seq = list(prompt)
        while len(seq) - len(prompt) < n_new:
            tree = p.propose([0], 5)[0]
            logits, _ = fresh(target, seq + tree.tokens.tolist()) if tree.num_nodes else fresh(target, seq)
            # Walk the tree greedily (target logits for a tree: recompute each path from scratch).
            node, emitted = -1, []
            while True:
                ctx = seq + [int(tree.tokens[j]) for j in (tree.path_to(node) if node >= 0 else [])]
                best = int(fresh(target, ctx)[0][-1].argmax())
                match = [c for c in tree.children_of(node) if int(tree.tokens[c]) == best]
                emitted.append(best)
                if not match:
                    break
                node = match[0]
            p.commit(0, emitted)
            seq += emitted
        assert seq[len(prompt):][:n_new] == want, mode


def test_confidence_threshold_stops_the_chain(drafter):
    p = make(drafter, min_path_prob=0.05)
    prompt = [2, 3]
    p.begin(0, prompt)
    tree = p.propose([0], 8)[0]
    toks, cum = tree.tokens.tolist(), 1.0
    for i in range(len(toks) + 1):
        q = torch.softmax(fresh(drafter, prompt + toks[:i])[0][-1], -1)
        nxt = float(q.max())
        if i < len(toks):
            cum *= nxt
            assert cum >= 0.05
        elif len(toks) < 8:
            assert cum * nxt < 0.05, "the chain stopped although the next token was confident enough"
    assert make(drafter, min_path_prob=1.0).propose  # constructible at the bound
    q1 = make(drafter, min_path_prob=1.0)
    q1.begin(0, prompt)
    assert q1.propose([0], 4)[0].num_nodes == 0


def test_tokenizer_and_vocab_mismatch_refused(drafter):
    other = TokenizerInfo(vocab={**TOK.vocab, "t1": 2, "t2": 1}, special={"eos_token": "t0"})
    with pytest.raises(IncompatibleArtifactError, match="2 ids map to different tokens"):
        DraftModelProposer(drafter, target_tokenizer=TOK, draft_tokenizer=other)
    with pytest.raises(ValueError, match="columns"):
        make(drafter, target_vocab_size=V + 1)
    with pytest.raises(ValueError, match="mode"):
        make(drafter, mode="beam")
    with pytest.raises(ValueError, match="only applies to mode='sample'"):
        make(drafter, sampling=SamplingParams(0.5))
    with pytest.raises(ValueError, match="temperature > 0"):
        make(drafter, mode="sample", sampling=SamplingParams(0.0))
    p = make(drafter)
    assert p.artifact.bound_to == "tokenizer" and p.artifact.fingerprint.startswith("tok-")
    p.begin(0, [1])
    with pytest.raises(ValueError, match="outside the drafter's vocabulary"):
        p.commit(0, [V])
    with pytest.raises(ValueError, match="already begun"):
        p.begin(0, [1])


def test_memory_bytes_counts_weights_and_kv(drafter):
    p = make(drafter)
    weights = sum(t.numel() * t.element_size() for t in drafter.parameters())
    assert p.weight_bytes() >= weights
    assert p.memory_bytes() == p.weight_bytes()
    p.begin(0, list(range(10)))
    p.propose([0], 1)
    r = p._requests[0]
    held = sum(l.keys.numel() * l.keys.element_size() * 2 for l in r.cache.layers)
    assert p.memory_bytes() == p.weight_bytes() + held
    assert p.memory_bytes(batch=3, context=100) == p.weight_bytes() + 300 * p.kv_bytes_per_token()
    with pytest.raises(ValueError, match="both"):
        p.memory_bytes(batch=1)


@pytest.mark.parametrize("mode", ["greedy", "tree"])
def test_speculative_decoder_with_drafter_matches_plain_greedy(mode):
    from specdec.conformance.targets import noisy_copy
    from specdec.engine.decoder import SpeculativeDecoder
    from specdec.models import tiny_model

    target = tiny_model(seed=3)
    drafter = noisy_copy(target, std=0.3, seed=4)  # agrees with the target often, not always
    tok = TokenizerInfo(vocab={f"t{i}": i for i in range(target.config.vocab_size)}, special={})
    prop = DraftModelProposer(drafter, target_tokenizer=tok, draft_tokenizer=tok, mode=mode,
                              target_vocab_size=target.config.vocab_size)
    prompt = [2, 5, 7, 11]
    ref = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, 4, dtype=torch.long),
                          max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)[0, 4:].tolist()
    out = SpeculativeDecoder(target, prop, max_budget=6, budget=6).generate(prompt, 20)
    assert out.tokens == ref
    assert out.metrics.accepted > 0 and out.metrics.steps < len(ref), out.metrics.summary()  # drafts were accepted


def test_each_request_drafts_from_its_own_sampling(drafter):
    """One decoder, requests at different temperatures: the drafter's q follows each request's
    processing (the decoder passes it to begin), and a greedy request gets argmax drafts."""
    from specdec.engine.decoder import SpeculativeDecoder

    target = tiny(2)
    prop = make(drafter, mode="sample", sampling=SamplingParams(1.0), generator=torch.Generator().manual_seed(0))
    seen = []  # (context the draft followed, drafted tree)
    real = prop.propose

    def spy(req_ids, budget):
        context = list(prop._requests[req_ids[0]].committed)
        trees = real(req_ids, budget)
        seen.append((context, trees[0]))
        return trees

    prop.propose = spy
    dec = SpeculativeDecoder(target, prop, budget=3)
    prompt = [1, 2, 3, 4]
    for temp in (0.5, 1.5):
        seen.clear()
        dec.generate(prompt, 4, SamplingParams(temperature=temp), stop_tokens=(),
                     generator=torch.Generator().manual_seed(1))
        context, tree = seen[0]
        want = SamplingParams(temperature=temp).process(fresh(drafter, context)[0][-1])
        assert tree.num_nodes and not bool(tree.deterministic.any())
        torch.testing.assert_close(tree.draft_probs[0], want, atol=1e-5, rtol=1e-4)
    seen.clear()
    dec.generate(prompt, 4, stop_tokens=())  # greedy: deterministic argmax drafts
    assert seen and all(bool(t.deterministic.all()) for _, t in seen if t.num_nodes)
    with pytest.raises(TypeError, match="SamplingParams"):
        prop.begin("x", [1], sampling={"temperature": 1.0})
