"""The ``model.generate`` benchmark's harness (``specdec bench --custom-generate``,
``python -m benchmarks.engine.hf_generate``): batches, per-method accounting, speedups over plain
``generate`` at the same batch size, mismatch counts, and the flags refused before a model loads."""

import pytest

from specdec.measure.speedup import (BatchRun, Prompt, generate_markdown, generate_method, run_generate_benchmark,
                           summarize_generate)
from specdec.cli import main
from specdec.engine.decoder import SpeculativeDecoder
from specdec.integrations.hf import generate
from specdec.models import tiny_model
from specdec.proposers.suffix import SuffixProposer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_harness_runs_every_method_per_batch_and_compares_with_plain_generate():
    model = tiny_model("llama")
    prompts = [Prompt(cat, i, "", ids) for i, (cat, ids) in enumerate(
        [("a", [3, 4, 5, 3, 4]), ("a", [6, 7]), ("b", [8, 9, 10, 8, 9]), ("b", [11, 12, 13])])]

    def methods_for(batch):
        dec = SpeculativeDecoder(model, SuffixProposer(64), budget=4, max_budget=4)
        return [generate_method("hf_generate", model, None, 0),
                generate_method("hf_prompt_lookup", model, None, 0, max_batch=1, prompt_lookup_num_tokens=3),
                generate_method("custom_generate:suffix", model, None, 0, custom_generate=generate, decoder=dec),
                generate_method("custom_generate:none", model, None, 0, custom_generate=generate,
                                decoder=SpeculativeDecoder(model, None))]

    runs = run_generate_benchmark(methods_for, prompts, [1, 2], 8, None, 0)
    assert [(r.method, r.batch) for r in runs if r.category == "a"] == (
        [("hf_generate", 1), ("hf_prompt_lookup", 1), ("custom_generate:suffix", 1), ("custom_generate:none", 1)] * 2
        + [("hf_generate", 2), ("custom_generate:suffix", 2), ("custom_generate:none", 2)])  # lookup: batch 1 only
    table = summarize_generate(runs)
    for b in (1, 2):
        cells = table[b]["overall"]
        assert cells["hf_generate"].speedup == 1.0 and cells["custom_generate:suffix"].mismatches == 0
        assert cells["custom_generate:suffix"].tokens == cells["hf_generate"].tokens == 4 * 8
        assert cells["custom_generate:suffix"].steps > 0
        assert cells["custom_generate:none"].mismatches == 0 and cells["custom_generate:none"].accepted == 0
    text = generate_markdown(table)
    assert "### batch 2" in text and "| overall |" in text and "n/a" in text


def test_speedups_and_mismatches_are_per_batch_and_category():
    runs = [BatchRun("hf_generate", "a", 1, 2.0, 10, 0, 0, [[1, 2]]),
            BatchRun("x", "a", 1, 1.0, 10, 4, 6, [[1, 3]]),
            BatchRun("hf_generate", "a", 1, 2.0, 10, 0, 0, [[5]]),
            BatchRun("x", "a", 1, 1.0, 10, 4, 6, [[5]])]
    cell = summarize_generate(runs)[1]["a"]["x"]
    assert cell.speedup == pytest.approx(2.0) and cell.mismatches == 1 and cell.tokens_per_s == 10.0


@pytest.mark.parametrize("flags, message", [
    (["--no-hf-generate"], "drop --no-hf-generate"),
    (["--batch-sizes", "1,4", "--per-category", "2"], "needs --per-category >= 4"),
])
def test_flags_refused_before_the_model_loads(flags, message, capsys):
    assert main(["bench", "--custom-generate", "--model", "default", *flags]) == 2
    assert message in capsys.readouterr().err
