"""Accept: exact rejection sampling of draft trees against the target's processed distribution.

* :mod:`~specdec.sampling.rejection` -- the public entry points (``rejection_sample``,
  ``rejection_sample_batch``, ``rejection_sample_padded``, ``accept_logits``) and the :class:`Rule`
  each applies;
* :mod:`~specdec.sampling.params` -- :class:`SamplingParams` and :func:`process_logits`, the one
  processed distribution the guarantee is about;
* :mod:`~specdec.sampling.kernels` -- the vectorised torch kernels (chains, trees, greedy);
* :mod:`~specdec.sampling.reference` -- the readable one-node-at-a-time reference sampler.
"""

from .params import SamplingParams, process_logits
from .rejection import (AcceptResult, BatchAcceptResult, Rule, rejection_sample, rejection_sample_batch,
                        rejection_sample_padded, accept_logits)

__all__ = ["AcceptResult", "BatchAcceptResult", "Rule", "SamplingParams", "process_logits", "rejection_sample",
           "rejection_sample_batch", "rejection_sample_padded", "accept_logits"]
