"""specdec's decoding loop for transformers' string form of ``custom_generate``.

``model.generate(**inputs, custom_generate=specdec.integrations.hf.FOLDER, trust_remote_code=True,
proposer="suffix")`` runs this file; so does a checkpoint folder holding a copy of this
``custom_generate/`` folder, loaded with ``trust_remote_code=True`` (transformers then binds
``model.generate`` to ``functools.partial(generate, model=model)``, so ``generate``'s positional
arguments arrive in ``args``). It needs specdec installed.
"""

from ..folder import generate_from_folder


def generate(*args, model, **kwargs):
    """``model.generate``'s raw arguments, decoded by specdec (:func:`generate_from_folder`)."""
    return generate_from_folder(model, *args, **kwargs)
