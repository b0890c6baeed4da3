"""specdec inside ``model.generate``: ``custom_generate=specdec.integrations.hf.generate`` (the callable,
:mod:`.entry`) or ``custom_generate=specdec.integrations.hf.FOLDER, trust_remote_code=True`` (the
string form, :mod:`.folder`). One module per job: :mod:`.caller`, :mod:`.config`, :mod:`.inputs`,
:mod:`.logits`, :mod:`.stopping`, :mod:`.proposer`, :mod:`.collect`, :mod:`.decode_loop`,
:mod:`.output`. What carries over and what is refused: docs/huggingface.md."""

from pathlib import Path

from .entry import generate

#: The folder to pass as ``custom_generate=`` (string form): it holds ``custom_generate/generate.py``.
FOLDER = str(Path(__file__).parent)

__all__ = ["FOLDER", "generate"]
