"""The optional ``vllm.general_plugins`` entry point: warn when the installed vLLM is outside the tested range.

vLLM runs it in each of its processes at start-up. It changes nothing in vLLM; it logs a warning on
logger ``vllm.specdec`` when the version is outside
:data:`specdec.integrations.vllm.version.SUPPORTED_RANGE`.
"""

from __future__ import annotations

import logging

from . import LOGGER_NAME, version

logger = logging.getLogger(LOGGER_NAME)


def register() -> str | None:
    """Check the installed vLLM; returns the warning logged (None when in range or vLLM is absent)."""
    found = version.installed()
    if found is None:
        return None
    message = version.check(found[1])
    if message:
        logger.warning(message)
    return message
