"""The optional ``vllm.general_plugins`` entry point: warn when the installed vLLM is outside the tested range.

vLLM runs every registered general plugin in each of its processes at start-up. This one changes
nothing in vLLM; it only logs a warning (``logging``, logger ``specdec.vllm``) when the version is
outside :data:`specdec.integrations.vllm.version.SUPPORTED_RANGE`, so a user who upgrades vLLM
hears that the experimental ``custom_class`` contract may have changed before drafts go wrong.
Registered in setup.py as ``specdec = specdec.integrations.vllm.plugin:register``.
"""

from __future__ import annotations

import logging

from . import version

logger = logging.getLogger("specdec.vllm")


def register() -> str | None:
    """Check the installed vLLM; returns the warning logged (None when in range or vLLM is absent)."""
    found = version.installed()
    if found is None:
        return None
    message = version.check(found[1])
    if message:
        logger.warning(message)
    return message
