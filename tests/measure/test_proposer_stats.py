"""measure: proposer specs, per-category acceptance assembly, target memory on a tiny model."""

import pytest

from specdec.models import tiny_model
from specdec.estimate.acceptance import AcceptanceDist
from specdec.proposers.registry import make_proposer
from specdec.measure.proposer_stats import Workload, measure_proposer, target_memory


def test_suffix_measurement_per_category_and_overall():
    model = tiny_model()
    prompts = {"a-1": [3, 4, 5, 6, 3, 4, 5], "a-2": [7, 8, 9], "b-1": [10, 11, 12, 10, 11]}
    outputs = {"a-1": [6, 3, 4, 5, 6, 3, 4, 5], "a-2": [7, 8, 9, 7, 8, 9], "b-1": [12, 10, 11, 12, 10, 11]}
    wl = Workload(prompts, outputs, {"a-1": "a", "a-2": "a", "b-1": "b"})
    m = measure_proposer("suffix", model, None, wl, budget=4)
    assert set(m.acceptance) == {"a", "b", "all"}
    assert m.acceptance["all"].steps == m.acceptance["a"].steps + m.acceptance["b"].steps
    assert m.artifact["bound_to"] == "nothing" and m.memory.fixed_bytes >= 0
    # repetitive outputs: a lookup proposer must accept something
    assert m.acceptance["all"].expected_accepted(4) > 0
    assert [i.output_len for i in wl.items()] == [8, 6, 6]


def test_bad_proposer_spec_and_target_memory():
    model = tiny_model()
    with pytest.raises(ValueError, match="unknown proposer spec"):
        make_proposer("lookahead", model, None)
    with pytest.raises(ValueError, match="does not exist"):
        make_proposer("draft:/no/such/dir", model, None)
    mem = target_memory(model)
    assert mem["kv_bytes_per_token"] == 2 * 2 * 2 * 8 * 4 and mem["weights_bytes"] > 0


def test_suffix_spec_with_a_responses_file_warms_the_global_cache(tmp_path):
    import json

    model = tiny_model()
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"response_ids": [5, 6, 7, 8]}) + "\n\n" + json.dumps({"output_ids": [9, 10]}) + "\n")
    prop = make_proposer(f"suffix:{path}", model, None)
    assert prop.global_stats() == {**prop.global_stats(), "tokens": 6, "documents": 2}
    prop.begin("r", [1, 5, 6])
    assert prop.propose(["r"], 4)[0].tokens.tolist() == [7, 8]
    assert make_proposer("suffix", model, None).global_stats()["tokens"] == 0
    path.write_text(json.dumps({"prompt_ids": [1]}) + "\n")
    with pytest.raises(ValueError, match=r"r.jsonl:1: expected an object with a 'response_ids' or 'output_ids'"):
        make_proposer(f"suffix:{path}", model, None)
    with pytest.raises(ValueError, match="cannot read responses file"):
        make_proposer(f"suffix:{tmp_path / 'missing.jsonl'}", model, None)
    path.write_text(json.dumps({"response_ids": [5, 640]}) + "\n")
    with pytest.raises(ValueError, match=r"documents\[0\] contains token id 640"):
        make_proposer(f"suffix:{path}", model, None)


def test_trained_heads_are_measured_through_the_decoder(tmp_path):
    """A proposer that needs target hidden states (Medusa) is measured end to end from its spec:
    memory probe with the prompt's hidden states, acceptance through the SpeculativeDecoder."""
    from specdec.artifacts import Manifest, save_artifact, target_fingerprint
    from specdec.proposers.heads import MedusaHeads

    model = tiny_model(seed=2)
    H = model.config.hidden_size
    heads = MedusaHeads(H, 2)
    manifest = Manifest(kind="medusa", name="m", bound_to="target", fingerprint=target_fingerprint(model),
                        config={"hidden_size": H, "num_heads": 2, "num_layers": 1, "rank_acc": [[0.5, 0.2]] * 2})
    save_artifact(str(tmp_path), heads.state_tensors(), manifest)
    prompts = {"a-1": [3, 4, 5, 6], "b-1": [7, 8, 9, 10, 11]}
    outputs = {"a-1": [1] * 6, "b-1": [2] * 6}
    wl = Workload(prompts, outputs, {"a-1": "a", "b-1": "b"})
    m = measure_proposer(f"medusa:{tmp_path}", model, None, wl, budget=4)
    assert set(m.acceptance) == {"a", "b", "all"} and m.acceptance["all"].steps > 0
    assert m.artifact["bound_to"] == "target" and m.memory.fixed_bytes > 0


def test_an_imported_histogram_stands_for_every_category_and_memory_is_still_measured():
    model = tiny_model()
    wl = Workload({"a-1": [3, 4, 5, 3, 4], "b-1": [7, 8, 9]}, {"a-1": [5, 3, 4], "b-1": [7, 8]},
                  {"a-1": "a", "b-1": "b"})
    chain = AcceptanceDist([50, 20, 10, 5, 15], name="vllm-chains")
    m = measure_proposer("suffix", model, None, wl, budget=4, acceptance=chain)
    assert set(m.acceptance) == {"a", "b", "all"} and all(a is chain for a in m.acceptance.values())
    assert m.artifact["bound_to"] == "nothing" and m.memory.fixed_bytes >= 0
    with pytest.raises(ValueError, match="measured with 4 draft tokens, fewer than the planned budget 6"):
        measure_proposer("suffix", model, None, wl, budget=6, acceptance=chain)


def test_acceptance_files_load_in_both_forms_and_bad_ones_are_named(tmp_path):
    import json

    counters = tmp_path / "acceptance-specdec.json"
    counters.write_text(json.dumps({"counts": [5, 3, 2], "drafted": [1, 4, 5], "counters": {"row_steps": 10}}))
    a = AcceptanceDist.load(counters)
    assert a.counts.tolist() == [5, 3, 2] and a.drafted.tolist() == [1, 4, 5] and a.name == "acceptance-specdec"
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(AcceptanceDist([1, 2], name="x").to_dict()))
    assert AcceptanceDist.load(saved).name == "x"
    for text, why in (("[1, 2]", "must hold a JSON object"), ("{", "not readable JSON"), ("{}", r"lacks \['counts'\]")):
        saved.write_text(text)
        with pytest.raises(ValueError, match=why) as err:
            AcceptanceDist.load(saved)
        assert str(saved) in str(err.value)
