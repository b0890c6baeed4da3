"""Accept: exact rejection sampling of draft trees against the target's processed distribution
(:mod:`.rejection`: entry points and :class:`Rule`; :mod:`.params`: :class:`SamplingParams`,
:func:`process_logits`; :mod:`.kernels`; :mod:`.reference`: the readable reference sampler).
"""

from .params import SamplingParams, process_logits
from .rejection import (AcceptResult, BatchAcceptResult, Rule, rejection_sample, rejection_sample_batch,
                        rejection_sample_padded, accept_logits)

__all__ = ["AcceptResult", "BatchAcceptResult", "Rule", "SamplingParams", "process_logits", "rejection_sample",
           "rejection_sample_batch", "rejection_sample_padded", "accept_logits"]
