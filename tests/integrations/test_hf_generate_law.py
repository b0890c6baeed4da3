"""The end-to-end decoder law test (``specdec.conformance.decoder_law``) through the ``custom_generate``
entry: ``model.generate(do_sample=True, ..., custom_generate=specdec.integrations.hf.generate)`` on a
ragged, left-padded batch must sample the joint law of sampling the target token by token, at three
settings (temperature 1; temperature 0.7 with top-k 4; top-p 0.8), with the settings given to
``generate`` as Hugging Face options (so its warpers are what specdec maps onto its sampler).

Each case G-tests tokens 1-3, 1-4, 1-5 and 3-5 of 5 (``WINDOWS``) with Bonferroni over the 12 tests
at the suite's family level; seeds are fixed, so the tests are deterministic. Power: the same case
rejects ``generate`` given temperature 0.8 (p < 1e-8) or top-k 5 (p = 0) for the law of 0.7 / 4.
"""

from dataclasses import dataclass

import pytest
from hf_generate_helpers import left_pad

from specdec.conformance.decoder_law import WINDOWS, DecoderCase, check_decoder
from specdec.conformance.suite import FAMILY_ALPHA
from specdec.conformance.targets import context_target
from specdec.engine.metrics import RequestMetrics
from specdec.integrations.hf import generate
from specdec.sampling.params import SamplingParams

pytestmark = pytest.mark.usefixtures("one_thread")

V = 8
RAGGED = ((2, 5, 3), (4, 1, 6, 0, 7), (3, 3, 5, 2, 6, 1, 4, 0))
SETTINGS = {  # name -> (the sampler's params, the same as generate's options)
    "t1": (SamplingParams(1.0), {"temperature": 1.0, "top_k": 0}),
    "t0.7_topk4": (SamplingParams(0.7, top_k=4), {"temperature": 0.7, "top_k": 4}),
    "topp0.8": (SamplingParams(1.0, top_p=0.8), {"temperature": 1.0, "top_k": 0, "top_p": 0.8}),
}
PER_TEST_ALPHA = FAMILY_ALPHA / (len(WINDOWS) * len(SETTINGS))


@dataclass
class _Result:
    tokens: list
    metrics: RequestMetrics


class _Target:
    def __init__(self, model):
        self.model = model


class ThroughGenerate:
    """The decoder interface the law test drives (``generate_batch``, ``target.model``), implemented by
    one ``model.generate(..., custom_generate=...)`` call per batch: prompts left-padded, the sampling
    given as Hugging Face options, specdec's suffix proposer with a fixed budget of 6 nodes."""

    def __init__(self, model, options: dict):
        self.target, self.options = _Target(model), options

    def generate_batch(self, prompts, length, sampling, *, stop_tokens=(), generator=None):
        ids, mask = left_pad(prompts)
        out = self.target.model.generate(
            ids, attention_mask=mask, do_sample=True, **self.options, max_new_tokens=length, eos_token_id=None,
            pad_token_id=0, return_dict_in_generate=True, custom_generate=generate, proposer="suffix", budget=6,
            max_budget=6, generator=generator)
        return [_Result(row[ids.shape[1]:].tolist(), m) for row, m in zip(out.sequences, out.metrics)]


@pytest.fixture(scope="module")
def model():
    return context_target(V)


def _setting(name):
    """``t0.7_topk4`` (temperature and top-k both mapped) runs in the quick suite, the others are slow."""
    return pytest.param(name, marks=[] if name == "t0.7_topk4" else [pytest.mark.slow])


@pytest.mark.parametrize("setting", [_setting(s) for s in SETTINGS])
def test_custom_generate_samples_the_target_law(model, setting):
    sampling, options = SETTINGS[setting]
    case = DecoderCase(f"custom_generate/suffix/{setting}", lambda: ThroughGenerate(model, options), sampling,
                       RAGGED, trials=1000)
    results, stats = check_decoder(case, seed=1000 + list(SETTINGS).index(setting))
    assert stats.accepted > 0, f"{setting}: no draft token was ever accepted, the case proves nothing"
    failures = [str(r) for r in results if r.p_value < PER_TEST_ALPHA]
    assert not failures, f"{setting} rejected at per-test alpha {PER_TEST_ALPHA:.2e}: {failures}"
