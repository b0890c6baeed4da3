"""Every refusal of ``custom_generate``: a clear error naming the problem, raised before any forward of
the model (counted through its input embedding, which every forward uses)."""

from pathlib import Path

import pytest
import torch
from hf_generate_helpers import CHARS, ForwardCounter, char_tokenizer, left_pad
from transformers import StoppingCriteria, StoppingCriteriaList

from specdec import SpeculativeDecoder
from specdec.artifacts import IncompatibleArtifactError, target_fingerprint
from specdec.conformance.targets import noisy_copy
from specdec.estimate.verify_cost import VerifyCostModel
from specdec.integrations.hf import FOLDER, generate
from specdec.models import tiny_model
from specdec.artifacts import Artifact
from specdec.proposers.draft_model import DraftModelProposer
from specdec.proposers.suffix import SuffixProposer

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[3, 4, 5, 6, 7], [8, 9]]
EAGLE = Path(__file__).resolve().parents[2] / "artifacts" / "eagle3-smollm2-135m"


class BoundProposer(SuffixProposer):
    """A suffix proposer claiming a binding (what a trained artifact carries)."""

    def __init__(self, vocab, artifact):
        super().__init__(vocab)
        self.artifact = artifact


class Never(StoppingCriteria):
    def __call__(self, input_ids, scores, **kwargs):
        return torch.zeros(len(input_ids), dtype=torch.bool)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama")


def _refused(model, error, match, ids=None, mask=None, **kwargs):
    if ids is None:
        ids, mask = left_pad(PROMPTS)
    kwargs = {"custom_generate": generate, "max_new_tokens": 4, "pad_token_id": 0, **kwargs}
    with ForwardCounter(model) as counter, pytest.raises(error, match=match):
        model.generate(ids, attention_mask=mask, **kwargs)
    assert counter.calls == 0, f"{match}: {counter.calls} forwards ran before the refusal"


@pytest.mark.parametrize("options, match", [
    ({"num_beams": 2}, "num_beams=2 selects beam search"),
    ({"penalty_alpha": 0.6, "top_k": 4}, "penalty_alpha=0.6 selects contrastive search"),
    ({"dola_layers": "low"}, "dola_layers='low' selects DoLa"),
    ({"synced_gpus": True}, "synced_gpus=True"),
    ({"return_dict_in_generate": True, "output_scores": True}, "output_scores=True: the processed scores"),
    ({"return_dict_in_generate": True, "output_logits": True}, "output_logits=True"),
    ({"guidance_scale": 1.5}, "UnbatchedClassifierFreeGuidanceLogitsProcessor: classifier-free guidance"),
])
def test_modes_and_outputs_specdec_does_not_reproduce(model, options, match):
    _refused(model, ValueError, match, **options)


def test_inputs_the_verify_forward_cannot_take(model):
    ids, mask = left_pad(PROMPTS)
    right = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 0, 0, 0]]), torch.tensor([[1] * 5, [1, 1, 0, 0, 0]])
    _refused(model, ValueError, "row 1 of attention_mask is not left padding", *right)
    _refused(model, ValueError, r"model input\(s\) \['inputs_embeds'\]", inputs_embeds=torch.zeros(2, 5, 32),
             ids=None)
    _refused(model, ValueError, "a batch whose rows may stop early needs pad_token_id", eos_token_id=None,
             pad_token_id=None, stopping_criteria=StoppingCriteriaList([Never()]))
    from transformers import DynamicCache

    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(torch.tensor([[3, 4]]), cache=cache)
    _refused(model, ValueError, "prefills its own cache", ids=torch.tensor([[3, 4, 5]]), cache=cache)


def test_proposers_bound_to_another_checkpoint_or_tokenizer(model):
    other = tiny_model("llama", seed=1)
    stale = BoundProposer(64, Artifact("heads", "target", target_fingerprint(other)))
    _refused(model, IncompatibleArtifactError, "proposer 'heads' is bound to the target target-", proposer=stale)
    _refused(model, IncompatibleArtifactError, "was built for target", proposer=f"eagle:{EAGLE}")
    with pytest.warns(RuntimeWarning, match="allow_mismatch=True"):
        ids, mask = left_pad(PROMPTS)
        model.generate(ids, attention_mask=mask, max_new_tokens=3, pad_token_id=0, custom_generate=generate,
                       proposer=stale, allow_mismatch=True)
    tok, shuffled = char_tokenizer(), char_tokenizer(CHARS[::-1])
    drafter = DraftModelProposer(noisy_copy(model, std=0.1), target_tokenizer=shuffled, draft_tokenizer=shuffled)
    _refused(model, IncompatibleArtifactError, "must share the target's tokenizer", proposer=drafter,
             target_tokenizer=tok)
    _refused(model, ValueError, "needs the target's tokenizer", proposer=drafter)
    _refused(model, ValueError, r"assistant_model= \(mapped to specdec's draft-model proposer\) needs the target's",
             assistant_model=noisy_copy(model, std=0.1))
    _refused(model, IncompatibleArtifactError, "draft tokenizer differs from the target tokenizer",
             custom_generate=FOLDER, trust_remote_code=True, assistant_model=noisy_copy(model, std=0.1),
             tokenizer=tok, assistant_tokenizer=shuffled)


def test_sources_and_decoders(model):
    _refused(model, ValueError, r"one proposer source, got \['proposer', 'prompt_lookup_num_tokens'\]",
             proposer="suffix", prompt_lookup_num_tokens=3)
    _refused(model, ValueError, "decoder= was built over another model",
             decoder=SpeculativeDecoder(tiny_model("llama", seed=1)))
    _refused(model, ValueError, r"decoder= carries its own \['budget'\]", decoder=SpeculativeDecoder(model), budget=3)
    _refused(model, ValueError, "unknown proposer spec 'beam'", proposer="beam")
    _refused(model, ValueError, "budget= must be 'auto' or an int >= 0", budget="max")
    _refused(model, TypeError, "generator= must be a torch.Generator", generator=0)
    _refused(model, TypeError, "cost_model must be a VerifyCostModel or a sequence of them", cost_model=[0.02])
    _refused(model, ValueError, r"one of them 1 \(one row\), got \[2\]",
             cost_model=[VerifyCostModel([0, 1], [0.02, 0.03], batch=2)])


def test_architectures_specdec_refuses():
    alibi = tiny_model("falcon", alibi=True)
    _refused(alibi, ValueError, "ALiBi")
