"""benchmarks/vllm/drafter_acceptance.py: configurations map to the speculative configs vLLM takes, and
bad arguments are refused by name before any engine starts (the engines themselves run in the vLLM venv)."""

import pytest

from benchmarks.vllm import drafter_acceptance as da


def test_each_configuration_is_the_engine_config_it_names():
    assert da.speculative_config("off", 4) == (None, {})
    spec, options = da.speculative_config("specdec-gate", 3)
    assert spec == {"method": "custom_class", "model": da.DRAFTER, "num_speculative_tokens": 3}
    assert options["cost_gate"] is True and da.speculative_config("specdec", 3)[1]["cost_gate"] is False
    assert da.speculative_config("suffix", 4)[0] == {"method": "suffix", "num_speculative_tokens": 4}
    assert da.speculative_config("ngram", 2)[0]["method"] == "ngram"


def test_bad_arguments_are_refused_before_any_engine(tmp_path, capsys):
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.a]\nshare = 1.0\nobjective = "latency"\nttft_s = 1.0\ntpot_s = 0.1\n'
                     f'rates = [0.1, 1.0]\nprompts = "{tmp_path / "p.jsonl"}"\nrequests = 2\n')
    (tmp_path / "p.jsonl").write_text("".join(f'{{"category": "c", "turns": ["hello {i}"]}}\n' for i in range(4)))
    for argv, why in ((["--configs", "off,eagle"], "--configs takes off, specdec"),
                      (["--k", "0"], "--k must be >= 1"),
                      (["--pool", "b"], "pool 'b' is not in")):
        full = ["--pools", str(pools), "--pool", "a"] + argv
        with pytest.raises(SystemExit):
            da.main(full)
        assert why in capsys.readouterr().err
