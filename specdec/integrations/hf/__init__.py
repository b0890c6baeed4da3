"""specdec inside ``model.generate``: one argument switches Hugging Face users to exact speculative decoding.

* ``model.generate(**inputs, custom_generate=specdec.integrations.hf.generate, proposer="suffix")``:
  the callable form (:mod:`.entry`);
* ``model.generate(**inputs, custom_generate=specdec.integrations.hf.FOLDER, trust_remote_code=True,
  proposer="suffix")``: the string form, a local ``custom_generate/`` folder (:mod:`.folder`).

What carries over from ``generate`` and what is refused: docs/huggingface.md. One module per job:
:mod:`.caller` (arguments transformers keeps from a callable), :mod:`.config` (refused modes and
outputs), :mod:`.inputs` (left-padded rows), :mod:`.logits` (processors per tree node),
:mod:`.stopping` (criteria), :mod:`.proposer` (which drafter, and its binding), :mod:`.collect`
(cutting, streaming, assembling), :mod:`.loop` (one call), :mod:`.output` (the returned dict).
"""

from pathlib import Path

from .entry import generate

#: The folder to pass as ``custom_generate=`` (string form): it holds ``custom_generate/generate.py``.
FOLDER = str(Path(__file__).parent)

__all__ = ["FOLDER", "generate"]
