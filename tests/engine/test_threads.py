"""Threads: one decoder per thread is the rule (a second thread is refused with that message), and
separate decoders over one shared model decode in parallel with the single-thread results."""

import threading

import torch

from specdec import ReplayProposer
from specdec.engine.decoder import SpeculativeDecoder
from specdec.models import tiny_model
from specdec.proposers.suffix import SuffixProposer
from specdec.proposers.suffix_options import SuffixGlobalCache

PROMPTS = [[3, 4, 5, 6, 7, 3, 4, 5], [8, 9, 8, 9], [10, 11, 12, 10, 11], [13, 14, 13, 14, 13]]


def test_one_decoder_from_a_second_thread_is_refused_by_name():
    model = tiny_model("llama")
    dec = SpeculativeDecoder(model, SuffixProposer(64), budget=4)
    inside, release, errors = threading.Event(), threading.Event(), []
    stream = dec.stream(PROMPTS[0], 16)

    def hold():
        next(stream)  # the run is open in this thread until the stream is closed
        inside.set()
        release.wait(5)
        stream.close()

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(5)
    try:
        dec.generate(PROMPTS[1], 4)
    except RuntimeError as exc:
        errors.append(str(exc))
    finally:
        release.set()
        t.join()
    assert errors and "one decoder per thread" in errors[0]
    assert dec.generate(PROMPTS[1], 4).tokens  # free again once the other thread's run closed


def test_one_thread_may_interleave_its_own_runs():
    dec = SpeculativeDecoder(tiny_model("llama"), SuffixProposer(64), budget=4)
    a, b = dec.stream(PROMPTS[0], 6), dec.stream(PROMPTS[1], 6)
    assert next(a).tokens and next(b).tokens
    a.close(), b.close()


def test_separate_decoders_over_one_model_in_four_threads():
    model = tiny_model("llama")
    want = [SpeculativeDecoder(model).generate(p, 16, stop_tokens=()).tokens for p in PROMPTS]
    got, errors, accepted = [None] * len(PROMPTS), [], [0] * len(PROMPTS)

    def work(i):
        try:
            prop = SuffixProposer(64) if i % 2 else ReplayProposer({0: want[i]})
            dec = SpeculativeDecoder(model, prop, budget=4)
            res = dec.generate(PROMPTS[i], 16, stop_tokens=(), req_id=0)
            got[i], accepted[i] = res.tokens, res.metrics.accepted
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and got == want
    assert all(a > 0 for a in accepted), accepted  # every thread verified and accepted drafts
    assert not any(k.startswith("_specdec") for k in model.__dict__)
    assert all("forward" not in m.__dict__ for m in model.modules())
    assert torch.is_inference_mode_enabled() is False


def test_frozen_runs_are_bit_reproducible_with_a_seed():
    """Run after run, the same seed gives the same samples once nothing learns between runs."""
    from specdec.estimate.verify_cost import VerifyCostModel
    from specdec.sampling.params import SamplingParams

    model = tiny_model("llama")
    prop = SuffixProposer(64, cache=SuffixGlobalCache(freeze_global=True))
    prop.warm([PROMPTS[0] * 3, PROMPTS[2] * 3])
    dec = SpeculativeDecoder(model, prop, cost_model=VerifyCostModel([0, 1, 8], [1.0, 1.05, 1.3]), adapt=False)
    runs = [[r.tokens for r in dec.generate_batch(PROMPTS, 12, SamplingParams(temperature=1.0),
                                                   generator=torch.Generator().manual_seed(0))] for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert prop.global_stats()["documents"] == 2  # the ended requests did not join the frozen cache
    assert all(not c.predicted for c in dec.calibrations.values()) and dec.live_cost.seconds == [1.0, 1.05, 1.3]
