"""DraftHead: how a drafter holds its reduced LM-head rows (float16-rounded by default), and that
rounding them changes drafts only by rounding the weights, never the decoded output."""

import pytest
import torch

from specdec import Artifact, SpeculativeDecoder
from specdec.artifacts import target_fingerprint
from specdec.models import tiny_model
from specdec.ops.skinny_linear import linear_rows, op_available
from specdec.proposers.eagle import EagleProposer
from specdec.proposers.eagle3_layer import Eagle3Config, Eagle3Layer
from specdec.proposers.reduced_vocab import DraftHead, HeadDtypeError
from specdec.proposers.registry import make_proposer

LAYERS = (1, 3, 5)


def _weight(seed=0, v=300, h=64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(v, h, generator=g) * 0.37  # not float16-exact


def test_float16_rounds_reduced_float32_rows_once_and_the_kernel_reads_an_exact_copy():
    w, ids = _weight(), torch.tensor([5, 0, 17, 299, 42])
    head = DraftHead(w, ids, "float16")
    assert head.dtype == "float16"
    torch.testing.assert_close(head.rows, w[ids].half().float(), rtol=0, atol=0)
    assert not torch.equal(head.rows, w[ids])  # really rounded
    x = torch.randn(3, 64)
    if op_available():  # the kernel from the float16 copy == the kernel from the rounded float32 rows
        assert head.kernel is not None and torch.equal(head.kernel.float(), head.rows)
        assert head.nbytes == 5 * 64 * (4 + 2)
        assert torch.equal(head.logits(x), linear_rows(x, head.rows, None))
    else:  # nothing could read a copy
        assert head.kernel is None and head.nbytes == 5 * 64 * 4
    torch.testing.assert_close(head.logits(x), x @ head.rows.T, rtol=1e-5, atol=1e-5)
    # The default rounds exactly where the compiled kernel reads the copy, and keeps the rows elsewhere.
    assert DraftHead(w, ids).dtype == ("float16" if op_available() else "float32")
    assert w.dtype == torch.float32 and not torch.equal(w[ids], head.rows)  # the target's head untouched


def test_float32_keeps_the_gathered_rows_and_the_full_head_is_the_targets_own():
    w, ids = _weight(1), torch.tensor([3, 1, 2])
    head = DraftHead(w, ids, "float32")
    assert head.dtype == "float32" and torch.equal(head.rows, w[ids]) and head.kernel is None
    assert head.nbytes == 3 * 64 * 4
    exact = torch.randint(-8, 8, (10, 64)).float() / 4
    assert (DraftHead(exact, torch.tensor([0, 4]), "float32").kernel is not None) == op_available()  # exact: copied
    full = DraftHead(w, None)
    assert full.rows.data_ptr() == w.data_ptr() and full.kernel is None and full.nbytes == 0
    assert full.dtype == "float32"


def test_bad_head_dtypes_are_refused_by_name():
    w = _weight(2)
    with pytest.raises(HeadDtypeError, match="head_dtype must be one of"):
        DraftHead(w, torch.tensor([1]), "bfloat16")
    with pytest.raises(HeadDtypeError, match="full vocabulary"):
        DraftHead(w, None, "float16")
    with pytest.raises(HeadDtypeError, match="torch.float64 rows"):
        DraftHead(w.double(), torch.tensor([1]), "float16")
    for ids in (torch.tensor([1]), None):  # "float32" on a bfloat16 target would be a false name
        with pytest.raises(HeadDtypeError, match="LM head is torch.bfloat16; pass head_dtype=None"):
            DraftHead(w.bfloat16(), ids, "float32")
    assert DraftHead(w.bfloat16(), torch.tensor([1])).dtype == "bfloat16"


def _eagle(target, vocab_ids, lm_weight, **kw):
    torch.manual_seed(4)
    layer = Eagle3Layer(Eagle3Config.from_target(target.config, LAYERS), vocab_ids)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if "norm" not in name:
                p.normal_(0, 0.5)
    return EagleProposer(layer.eval(), target.get_input_embeddings().weight, lm_weight,
                         Artifact("eagle3", "target", target_fingerprint(target)), top_k=3, max_depth=3, **kw)


def test_eagle_float16_head_drafts_what_a_float16_rounded_target_head_drafts_and_decodes_exactly():
    target = tiny_model(seed=3, layers=6)
    lm = target.get_output_embeddings().weight
    ids = torch.arange(0, lm.shape[0], 2)  # a reduced vocabulary: every other id
    rounded = lm.detach().clone()
    rounded[ids] = rounded[ids].half().float()
    prompt = [4, 8, 15, 16, 23, 42]
    _, _, hidden = SpeculativeDecoder(target, _eagle(target, ids, lm)).target.prefill([prompt])
    trees = []
    for prop in (_eagle(target, ids, lm, head_dtype="float16"), _eagle(target, ids, rounded, head_dtype="float32")):
        prop.begin("r", prompt, target_hidden=hidden[0])
        tree = prop.propose(["r"], 12)[0]
        trees.append((tree.tokens.tolist(), tree.parents.tolist()))
    assert trees[0] == trees[1]
    assert _eagle(target, ids, lm).head.dtype == ("float16" if op_available() else "float32")
    plain = SpeculativeDecoder(target).generate(prompt, 24).tokens
    for dtype in ("float16", "float32"):
        dec = SpeculativeDecoder(target, _eagle(target, ids, lm, head_dtype=dtype), budget=6)
        out = dec.generate(prompt, 24)
        assert out.tokens == plain
        assert out.metrics.accepted > 0, dtype  # drafts from the reduced head were verified and accepted


def test_make_proposer_refuses_a_head_dtype_before_reading_any_artifact(tmp_path):
    target = tiny_model(seed=1)
    missing = str(tmp_path / "no-such-artifact")
    with pytest.raises(HeadDtypeError, match="head_dtype must be one of"):
        make_proposer(f"medusa:{missing}", target, None, head_dtype="fp16")
    with pytest.raises(ValueError, match="applies to medusa, eagle and hybrid proposers, not 'suffix'"):
        make_proposer("suffix", target, None, head_dtype="float32")


def test_drafting_options_a_manifest_carries_are_applied_or_refused_by_name(tmp_path):
    """Nothing a checkpoint carries is dropped: Medusa applies a manifest's head_dtype as EAGLE does,
    an explicit option overrides it, None leaves it, and an option neither proposer takes is an error."""
    from specdec.artifacts import Manifest, save_artifact
    from specdec.proposers.heads import MedusaHeads, MedusaProposer

    target = tiny_model(seed=2)
    lm = target.get_output_embeddings().weight
    heads = MedusaHeads(lm.shape[1], 2, 1, vocab_ids=torch.arange(0, lm.shape[0], 2))
    config = {"hidden_size": lm.shape[1], "num_heads": 2, "num_layers": 1, "rank_acc": [[0.5, 0.2], [0.3, 0.1]]}

    def medusa(drafting, **kw):
        d = tmp_path / f"m{len(list(tmp_path.iterdir()))}"
        m = Manifest(kind="medusa", name="m", bound_to="target", fingerprint=target_fingerprint(target),
                     config={**config, **({} if drafting is None else {"drafting": drafting})})
        save_artifact(str(d), heads.state_tensors(), m)
        return MedusaProposer.load(str(d), target, **kw)

    assert medusa({"head_dtype": "float32"}).head.dtype == "float32"
    assert medusa({"head_dtype": "float32"}, head_dtype=None).head.dtype == "float32"
    if op_available():
        assert medusa(None).head.dtype == "float16"
        assert medusa({"head_dtype": "float32"}, head_dtype="float16").head.dtype == "float16"
    with pytest.raises(ValueError, match=r"drafting options \['top_k'\] the manifest carries are not options"):
        medusa({"top_k": 4})
    with pytest.raises(ValueError, match="must be a mapping"):
        medusa(["head_dtype"])
    layer = Eagle3Layer(Eagle3Config.from_target(target.config, LAYERS), torch.arange(0, lm.shape[0], 2))
    e = Manifest(kind="eagle", name="e", bound_to="target", fingerprint=target_fingerprint(target),
                 config={"layer": layer.config.to_dict(), "architecture": "eagle3",
                         "drafting": {"top_k": 3, "beam": 2}})
    save_artifact(str(tmp_path / "e"), layer.state_tensors(torch.float16), e)
    with pytest.raises(ValueError, match=r"drafting options \['beam'\] the manifest carries"):
        EagleProposer.load(str(tmp_path / "e"), target)
    e.config["drafting"] = {"top_k": 3}
    save_artifact(str(tmp_path / "e"), layer.state_tensors(torch.float16), e)
    with pytest.raises(ValueError, match=r"drafting options \['topk'\] were given"):
        EagleProposer.load(str(tmp_path / "e"), target, topk=2)
    assert EagleProposer.load(str(tmp_path / "e"), target, top_k=None).top_k == 3
    # through a proposer spec the refusal keeps its reason (it is no sign of weights that do not load)
    from specdec.artifacts import DraftingOptionError

    e.config["drafting"] = {"top_k": 3, "beam": 2}
    save_artifact(str(tmp_path / "e"), layer.state_tensors(torch.float16), e)
    with pytest.raises(DraftingOptionError, match=r"drafting options \['beam'\] the manifest carries") as err:
        make_proposer(f"eagle:{tmp_path / 'e'}", target, None)
    assert "does not load" not in str(err.value)
