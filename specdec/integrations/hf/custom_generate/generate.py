"""specdec's decoding loop for transformers' string form of ``custom_generate`` (and for a checkpoint
folder holding a copy of this ``custom_generate/`` folder, loaded with ``trust_remote_code=True``,
where ``generate``'s positional arguments arrive in ``args``). It needs specdec installed."""

from specdec.integrations.hf.folder import generate_from_folder  # absolute: transformers copies this file alone


def generate(*args, model, **kwargs):
    """``model.generate``'s raw arguments, decoded by specdec (:func:`generate_from_folder`)."""
    return generate_from_folder(model, *args, **kwargs)
