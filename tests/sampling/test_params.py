"""process_logits / SamplingParams: the processed target distribution and its validation."""

import math

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from specdec.sampling.params import SamplingParams, process_logits
from specdec.checks import check_distributions


def _hf(logits, temperature, top_k, top_p):
    scores = TemperatureLogitsWarper(temperature)(None, logits.clone())
    if top_k is not None:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return torch.softmax(scores, -1)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, 1.0), (0.7, None, 1.0), (1.3, 5, 1.0),
                                                     (1.0, None, 0.8), (0.8, 10, 0.9), (2.0, 1, 0.5)])
def test_matches_hugging_face_warpers(temperature, top_k, top_p):
    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(0)) * 3
    ours = process_logits(logits, temperature, top_k, top_p)
    ref = _hf(logits, temperature, top_k, top_p)
    assert torch.equal(ours > 0, ref > 0)
    assert torch.allclose(ours, ref, atol=1e-6)
    assert torch.allclose(ours.sum(-1), torch.ones(16))


def test_temperature_zero_is_point_mass_on_torch_argmax():
    logits = torch.tensor([[1.0, 5.0, 5.0, 2.0], [0.0, -math.inf, 3.0, 3.0]])
    probs = process_logits(logits, 0.0)
    assert probs.tolist() == [[0, 1, 0, 0], [0, 0, 1, 0]]
    assert SamplingParams(temperature=0).greedy and not SamplingParams().greedy


def test_top_k_keeps_ties_with_kth():
    logits = torch.tensor([[3.0, 2.0, 2.0, 1.0]])
    assert (process_logits(logits, top_k=2) > 0).tolist() == [[True, True, True, False]]


def test_top_p_always_keeps_the_most_likely_token():
    logits = torch.tensor([[10.0, 0.0, 0.0]])
    assert (process_logits(logits, top_p=0.01) > 0).tolist() == [[True, False, False]]


def test_minus_inf_masks_are_allowed_and_give_zero():
    logits = torch.tensor([[0.0, -math.inf, 1.0]])
    assert process_logits(logits)[0, 1] == 0


@pytest.mark.parametrize("bad,match", [(float("nan"), "NaN"), (float("inf"), r"\+inf")])
def test_nan_and_inf_logits_are_refused(bad, match):
    logits = torch.randn(2, 6)
    logits[1, 3] = bad
    with pytest.raises(ValueError, match=match):
        process_logits(logits)


def test_all_masked_row_is_refused():
    with pytest.raises(ValueError, match="every entry is -inf"):
        process_logits(torch.full((1, 4), -math.inf))


def test_integer_logits_are_refused():
    with pytest.raises(TypeError, match="floating-point"):
        process_logits(torch.ones(2, 3, dtype=torch.long))


@pytest.mark.parametrize("kwargs,err", [
    (dict(temperature=-0.1), ValueError), (dict(temperature=float("nan")), ValueError),
    (dict(temperature=float("inf")), ValueError), (dict(temperature="1"), TypeError),
    (dict(top_k=0), ValueError), (dict(top_k=2.5), TypeError), (dict(top_k=True), TypeError),
    (dict(top_p=0.0), ValueError), (dict(top_p=1.5), ValueError), (dict(top_p=None), TypeError),
])
def test_sampling_params_validation(kwargs, err):
    with pytest.raises(err):
        SamplingParams(**kwargs)


def test_sampling_params_process_is_process_logits():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(1))
    sp = SamplingParams(0.9, 7, 0.95)
    assert torch.equal(sp.process(logits), process_logits(logits, 0.9, 7, 0.95))


def test_half_precision_input_is_processed_in_float32():
    logits = torch.randn(2, 30).half()
    out = process_logits(logits, 0.8)
    assert out.dtype == torch.float32 and torch.allclose(out.sum(-1), torch.ones(2))


def test_check_distributions_ignores_padding_rows():
    probs = torch.full((2, 3, 4), 0.25)
    probs[1, 2] = float("nan")
    valid = torch.tensor([[True, True, True], [True, True, False]])
    check_distributions(probs, valid)
    with pytest.raises(ValueError, match=r"row \[1, 2\]"):
        check_distributions(probs)
