"""benchmarks.vllm.reverdict: the goal read again for another planned configuration from paired
rounds already served, and rounds joined only where the planned configuration is the same."""

import json

import pytest

from benchmarks.vllm import reverdict

TABLE3 = {"method": "custom_class", "num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 16, 0]]}
TABLE5 = {"method": "custom_class", "num_speculative_tokens_per_batch_size": [[1, 5, 4], [6, 16, 0]]}


def _folder(tmp_path, name, scores: dict, configs: dict | None = None, rate=0.316):
    """A schedule_tax.py folder: ``scores[config]`` per round (runs pair by their arrivals, drawn
    per folder)."""
    configs = configs or {}
    start = 100.0 * (1 + len(list(tmp_path.iterdir())))
    rows = [{"rate": rate, "config": c, "speculative_config": configs.get(c),
             "per_run": [{"score": x, "arrivals_end": start + i} for i, x in enumerate(xs)],
             "score": sorted(xs)[len(xs) // 2]} for c, xs in scores.items()]
    rows.append({"rate": rate, "config": "broken", "errors": ["vLLM refused"]})  # a row with no score is skipped
    folder = tmp_path / name
    folder.mkdir()
    (folder / "schedule_tax.json").write_text(json.dumps({"rows": rows, "args": {}}))
    return folder


def test_the_label_planned_moves_and_the_verdict_follows_the_rounds(tmp_path):
    f = _folder(tmp_path, "a", {"off": [0.30, 0.33, 0.29, 0.32, 0.28], "ngram:4": [0.30, 0.33, 0.29, 0.32, 0.28],
                                "suffix:4": [0.25, 0.27, 0.24, 0.26, 0.23]})
    assert reverdict.verdicts([f], "ngram:4")[0].startswith(f"- {f} at 0.316 req/s: met (")
    # 0.83x in all five rounds: never a pass, and five rounds cannot reach "NOT met" against two others
    # (one-sided p = 1/32 against 0.05 / 2)
    assert reverdict.verdicts([f], "suffix:4")[0].startswith(f"- {f} at 0.316 req/s: inconclusive (")
    with pytest.raises(ValueError, match="served 'eagle:4'"):
        reverdict.verdicts([f], "eagle:4")


def test_rounds_join_only_where_the_planned_configuration_is_the_same_table(tmp_path):
    """Two folders served the 1-3 table and one the 1-5 table under the same name: the two join (ten
    rounds), the third stands alone; an `off` served with another config in one folder is left out."""
    near = [0.30, 0.31, 0.29, 0.30, 0.28]
    a = _folder(tmp_path, "a", {"off": near, "custom_class:sched": near}, {"custom_class:sched": TABLE3})
    b = _folder(tmp_path, "b", {"off": near, "custom_class:sched": near}, {"custom_class:sched": TABLE3})
    c = _folder(tmp_path, "c", {"off": near, "custom_class:sched": near}, {"custom_class:sched": TABLE5})
    lines = reverdict.verdicts([a, b, c], "custom_class:sched", pool=True)
    joined = [line for line in lines if "folders joined" in line]
    assert len(joined) == 1 and joined[0].startswith("- 2 folders joined at 0.316 req/s: met (vs off")
    assert joined[0].count("1.00") == 10  # ten paired rounds
    assert reverdict.main([str(a), "--planned", "custom_class:sched"]) == 0
    with pytest.raises(SystemExit):
        reverdict.main([str(tmp_path), "--planned", "off"])  # not a schedule_tax.py folder
