"""One ``custom_generate`` call: check everything, build the decoder, run it, hand back what
``generate`` would. Every refusal (config, inputs, stopping, processors, proposer source,
architecture, artifact binding, the target's logits probe) comes before any decoding forward."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import torch

from .caller import CallerArguments
from .collect import Collector
from .config import UnsupportedGenerateOption, check_generation_config
from .inputs import read_prompts
from .logits import row_processors, split_processors
from .proposer import Source, build_proposer, choose_source
from .stopping import plan_stopping

DEFAULT_MAX_BUDGET = 64


@dataclass(frozen=True)
class Options:
    """specdec's own keyword arguments to ``model.generate(..., custom_generate=...)`` (docs/huggingface.md).

    Attributes:
        proposer: a spec string or a proposer object (default ``"suffix"``).
        decoder: a :class:`~specdec.SpeculativeDecoder` over the same model, reused across calls.
        target_tokenizer: the model's tokenizer (checks a tokenizer-bound drafter).
        cost_model: a :class:`~specdec.estimate.verify_cost.VerifyCostModel`, a list of them (one per
            batch size, one of them one row) or the path of a saved one; measured at the start of the
            call when None (one row, and the call's batch size).
        budget: ``"auto"`` or a fixed number of nodes.
        max_budget: most nodes drafted per request and step (default 64; ``prompt_lookup_num_tokens``).
        generator: a ``torch.Generator`` for sampling (default: torch's global one).
        allow_mismatch: draft with a proposer bound to another checkpoint (warns; still exact).
    """

    proposer: object = None
    decoder: object = None
    target_tokenizer: object = None
    cost_model: object = None
    budget: str | int = "auto"
    max_budget: int | None = None
    generator: torch.Generator | None = None
    allow_mismatch: bool = False

    def __post_init__(self):
        """Refuse a bad option when ``generate`` calls specdec, before anything is loaded or run."""
        def count(v, lo):
            return not isinstance(v, bool) and isinstance(v, int) and v >= lo

        if not (self.budget == "auto" or count(self.budget, 0)):
            raise ValueError(f"budget= must be 'auto' or an int >= 0, got {self.budget!r}")
        if self.max_budget is not None and not count(self.max_budget, 0):
            raise ValueError(f"max_budget= must be an int >= 0, got {self.max_budget!r}")
        if self.generator is not None and not isinstance(self.generator, torch.Generator):
            raise TypeError(f"generator= must be a torch.Generator, got {type(self.generator).__name__}")
        if not isinstance(self.allow_mismatch, bool):
            raise TypeError(f"allow_mismatch= must be True or False, got {self.allow_mismatch!r}")


OPTION_NAMES = tuple(f.name for f in fields(Options))


def decode(model, input_ids, logits_processor, stopping_criteria, generation_config, options: Options,
           caller: CallerArguments, model_kwargs: dict):
    """Decode the batch ``generate`` prepared; returns ``LongTensor[B, T + L]`` or, with
    ``return_dict_in_generate``, a :class:`~.output.SpecdecGenerateOutput`."""
    config = generation_config
    if config is None:
        raise TypeError("specdec.integrations.hf.generate is a custom_generate callable: pass it to "
                        "model.generate(..., custom_generate=specdec.integrations.hf.generate)")
    check_generation_config(config, caller.synced_gpus)
    prompts = read_prompts(input_ids, model_kwargs)
    plan = plan_stopping(stopping_criteria, prompts.width)
    node_processors, sampling = split_processors(logits_processor, bool(config.do_sample))
    pad = getattr(config, "_pad_token_tensor", None)
    pad_id = None if pad is None else int(torch.as_tensor(pad).reshape(-1)[0])
    if len(prompts.prompts) > 1 and plan.can_stop_early and pad_id is None:
        raise UnsupportedGenerateOption("a batch whose rows may stop early needs pad_token_id, to fill the rows that "
                                        "finished first (as model.generate does)")
    tokenizer = options.target_tokenizer if options.target_tokenizer is not None else caller.tokenizer
    source = choose_source(model, proposer=options.proposer, decoder=options.decoder,
                           assistant_model=caller.assistant_model,
                           prompt_lookup=getattr(config, "prompt_lookup_num_tokens", None), tokenizer=tokenizer)
    decoder = _decoder(model, source, options, tokenizer, caller, sampling)
    collector = Collector(prompts, plan, pad_id, caller.streamer)
    run = decoder.run(prompts.prompts, plan.max_new_tokens, sampling, stop_tokens=plan.stop_tokens,
                      generator=options.generator, processors=row_processors(node_processors, prompts.pad_prefix))
    try:
        for event in run:
            collector.add(event)
            if collector.done:
                break
    finally:
        run.close()
    collector.finish()
    sequences = collector.sequences(input_ids)
    if not getattr(config, "return_dict_in_generate", False):
        return sequences
    from .output import SpecdecGenerateOutput

    return SpecdecGenerateOutput(sequences=sequences, metrics=collector.metrics,
                                 finish_reasons=collector.finish_reasons)


def _decoder(model, source: Source, options: Options, tokenizer, caller: CallerArguments, sampling):
    """The :class:`~specdec.SpeculativeDecoder` of this call: the one given, or a new one (the
    architecture checked first, then the proposer loaded and checked)."""
    from ...engine.decoder import SpeculativeDecoder
    from ...estimate.verify_cost import VerifyCostModel, curves_by_batch
    from ...verify.capabilities import inspect_model
    from ...verify.hf import HFTarget

    if source.kind == "decoder":
        own = [n for n in ("cost_model", "max_budget") if getattr(options, n) is not None]
        own += ["budget"] if options.budget != "auto" else []
        if own:
            raise ValueError(f"decoder= carries its own {own}: set them on the SpeculativeDecoder instead")
        return source.value
    cost = options.cost_model
    if isinstance(cost, (str, Path)):
        cost = VerifyCostModel.load(cost)
    curves_by_batch(cost)  # a bad curve list is refused here, before the target's probe forward
    max_budget = options.max_budget if options.max_budget is not None else source.max_budget or DEFAULT_MAX_BUDGET
    inspect_model(model)  # refuses, by feature and without a forward, an architecture it cannot verify exactly
    proposer = build_proposer(source, model, tokenizer=tokenizer, assistant_tokenizer=caller.assistant_tokenizer,
                              sampling=sampling, allow_mismatch=options.allow_mismatch)
    target = HFTarget(model)  # its 2-token probe checks that the logits are the LM head's
    from transformers import GenerationConfig

    # The call's processors, sampling and stops are passed to run(); the decoder's own defaults stay neutral.
    return SpeculativeDecoder(target, proposer, max_budget=max_budget, budget=options.budget, cost_model=cost,
                              generation_config=GenerationConfig())
