"""The vLLM drafter's parts that need no vLLM: chain choice, options, version range, metrics, the
CPU expand kernel, the checkpoint fix-up, and the global cache over many requests."""

import json
import math

import numpy as np
import pytest
import torch

from specdec import DraftTree
from specdec.integrations.rows import best_chain
from specdec.integrations.vllm import LOGGER_NAME, cpu_sampling, plugin, version
from specdec.integrations.vllm import prometheus as metrics
from specdec.integrations.vllm.gate import GateStats
from specdec.integrations.vllm.options import ENV, DrafterOptions


def _random_tree(rng, n):
    parents = [-1] + [int(rng.integers(-1, i)) for i in range(1, n)]
    probs = rng.random(n).astype(np.float32)
    return DraftTree(torch.arange(n), torch.tensor(parents), vocab_size=n), probs, parents


def _depth(parents, i):
    d = 1
    while parents[i] >= 0:
        i, d = parents[i], d + 1
    return d


@pytest.mark.parametrize("seed", range(30))
def test_best_chain_is_the_best_root_to_leaf_path(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 12)), int(rng.integers(1, 5))
    tree, probs, parents = _random_tree(rng, n)
    got = best_chain(tree, torch.from_numpy(probs), k)
    best, best_path = -1.0, None
    for node in range(n):  # brute force: every node at depth <= k ends one candidate path
        if _depth(parents, node) > k:
            continue
        path, v = [], node
        while v >= 0:
            path.append(v)
            v = parents[v]
        path.reverse()
        score = float(sum(np.float64(probs[p]) for p in path))
        if score > best + 1e-9:
            best, best_path = score, path
    assert abs(sum(float(probs[t]) for t in got) - best) < 1e-6
    assert len(got) <= k and got[0] == best_path[0]


def test_best_chain_refuses_unscored_branching_trees():
    tree = DraftTree(torch.tensor([1, 2]), torch.tensor([-1, -1]), vocab_size=4)
    with pytest.raises(ValueError, match="propose_scored"):
        best_chain(tree, None, 2)
    chain = DraftTree.chain(torch.tensor([3, 1, 2]))
    assert best_chain(chain, None, 2) == [3, 1]


def test_options_resolve_and_refuse_by_name():
    o = DrafterOptions.resolve({"tree_budget": 8}, {ENV: json.dumps({"gate_off_above": 6, "use_global": True})})
    assert (o.tree_budget, o.gate_off_above, o.use_global) == (8, 6, True)
    assert DrafterOptions.resolve(None, {ENV: '{"gate_off_above": "inf"}'}).gate_off_above == math.inf
    with pytest.raises(ValueError, match="unknown drafter option.*'gate'"):
        DrafterOptions.resolve(None, {ENV: '{"gate": 3}'})
    with pytest.raises(ValueError, match="JSON object"):
        DrafterOptions.resolve(None, {ENV: "gate_off_above=3"})
    with pytest.raises(TypeError, match="'use_global'"):
        DrafterOptions(use_global="yes")
    assert DrafterOptions.resolve(None, {ENV: '{"cost_gate": true}'}).cost_gate is True
    with pytest.raises(TypeError, match="'cost_gate'"):
        DrafterOptions(cost_gate=1)
    with pytest.raises(ValueError, match="'proposer'"):
        DrafterOptions(proposer="eagle")


def test_version_range_and_plugin(monkeypatch, caplog):
    assert version.base_version("0.32.0+cpu") == (0, 32, 0)
    assert version.check("0.32.0") is None and version.check("0.33.1") is None
    assert "0.35.0" in version.check("0.35.0")
    assert version.has_cpu_expand_bug("0.32.0+cpu") and not version.has_cpu_expand_bug("0.33.0")
    with pytest.raises(ValueError, match="cannot read"):
        version.base_version("dev")
    monkeypatch.setattr(version, "installed", lambda: ("vllm", "0.40.0"))
    with caplog.at_level("WARNING", logger=LOGGER_NAME):
        assert "0.40.0" in plugin.register()
    assert "0.40.0" in caplog.text
    monkeypatch.setattr(version, "installed", lambda: None)
    assert plugin.register() is None


def test_metrics_collector_exports_vllm_prefixed_families():
    pytest.importorskip("prometheus_client")
    from prometheus_client import REGISTRY

    stats = GateStats(steps_drafting=5, steps_gated=2, drafted=40, accepted=12, accept_rate=0.3, budget=3,
                      floor=0.25, propose_seconds=0.004)
    unregister = metrics.register(stats, "t1")
    try:
        values = {(m.name, s.labels.get("decision")): s.value for m in REGISTRY.collect()
                  for s in m.samples if s.labels.get("drafter") == "t1"}
    finally:
        unregister()
    assert values[("vllm:specdec_steps", "gate_off")] == 2
    assert values[("vllm:specdec_accepted_tokens", None)] == 12
    assert values[("vllm:specdec_accept_rate", None)] == pytest.approx(0.3)
    assert values[("vllm:specdec_budget", None)] == 3
    assert values[("vllm:specdec_floor", None)] == pytest.approx(0.25)
    assert values[("vllm:specdec_propose_seconds", None)] == pytest.approx(0.004)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
def test_expand_into_fills_segments_in_place(dtype):
    x = torch.tensor([2, 0, 5], dtype=dtype)
    cu = torch.tensor([2, 2, 5], dtype=torch.int32)  # the middle request has no tokens
    out = torch.full((5,), 9, dtype=dtype)
    cpu_sampling.expand_into(out, x, cu, 0, 1)
    assert out.tolist() == [2, 2, 5, 5, 5]
    out = torch.full((4,), 9, dtype=dtype)
    cpu_sampling.expand_into(out, torch.tensor([0, 3], dtype=dtype), torch.tensor([1, 3], dtype=torch.int32), 0, 1)
    assert out.tolist() == [1, 3, 3, 9]  # replace_from -> replace_to; rows past cu[-1] untouched


def test_vllm_ready_adds_the_tied_embedding(tmp_path):
    from safetensors.torch import load_file, save_file

    from specdec.integrations.vllm.checkpoint import vllm_ready

    src = tmp_path / "m"
    src.mkdir()
    head = torch.randn(8, 4)
    save_file({"lm_head.weight": head, "model.norm.weight": torch.ones(4)}, str(src / "model.safetensors"))
    (src / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    (src / "tokenizer.json").write_text("{}")
    out = vllm_ready(src)
    assert out != src and (out / "tokenizer.json").exists()
    assert torch.equal(load_file(str(out / "model.safetensors"))["model.embed_tokens.weight"], head)
    assert vllm_ready(src) == out and vllm_ready(out) == out


def test_global_cache_memory_flat_and_acceptance_steady_over_10k_requests():
    """10k requests of mixed lengths through the batched path with the global cache on: the cache stays
    under its cap through many rebuilds, and acceptance after rebuilds does not fall below the start."""
    from specdec import SuffixProposer
    from specdec.proposers.suffix_options import SuffixDrafting, SuffixGlobalCache
    from specdec.proposers.suffix_rows import RowTracking

    vocab, cap = 500, 1 << 20
    prop = SuffixProposer(vocab, drafting=SuffixDrafting(max_depth=4),
                          cache=SuffixGlobalCache(use_global=True, global_cache_bytes=cap))
    batch = prop.row_batch(tree_budget=8, tracking=RowTracking(park_steps=1, max_parked=0))
    rng = np.random.default_rng(0)
    phrases = [rng.integers(0, vocab, int(rng.integers(5, 30))).astype(np.int32) for _ in range(300)]
    peak, windows = 0, []
    hits = tries = 0
    for req in range(10_000):
        parts = [phrases[int(rng.zipf(1.3)) % len(phrases)] for _ in range(int(rng.integers(1, 8)))]
        text = np.concatenate(parts)
        tok = np.zeros((1, text.size + 8), np.int32)
        tok[0, : text.size] = text
        n = 3
        while n < text.size:  # one row; each step commits the true token and checks the draft's first token
            chain = batch.step(tok, np.array([n], np.int32), np.array([1 if n > 3 else 0], np.int32), 4)[1]
            if chain.size:
                tries += 1
                hits += int(chain[0] == text[n])
            n += 1
        batch.step(np.zeros((0, 1), np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32), 4)  # it leaves
        peak = max(peak, prop.global_memory_bytes())
        if (req + 1) % 2500 == 0:
            windows.append(hits / max(tries, 1))
            hits = tries = 0
    assert prop.global_stats()["rebuilds"] >= 3
    assert peak <= cap
    assert min(windows[1:]) >= 0.9 * windows[0], windows
    assert windows[0] > 0.3, windows  # the cache is really drafting
