"""Deliberately broken speculative engines: an audit must flag every one of them.

Each is :class:`~specdec.conformance.audit.honest_engine.ReferenceEngine` with one small bug of a kind engines have
shipped (docs/audit.md, "The reference engine"). :data:`FLAGGED_BY` names the setting each must be flagged on.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import torch

from .honest_engine import ReferenceEngine


class WrongTemperatureOnDrafts(ReferenceEngine):
    """Verify steps process their rows at 1.15 x the temperature."""

    method = "ngram+wrong-temperature"

    def row_sampling(self, batch, b, row, drafts):
        s = batch[b]
        return replace(s, temperature=s.temperature * 1.15) if drafts else s


class PenaltyIgnoredOnDrafts(ReferenceEngine):
    """Rows verifying a draft token are processed without penalties (the bonus row keeps them)."""

    method = "ngram+penalty-ignored"

    def row_sampling(self, batch, b, row, drafts):
        s = batch[b]
        return replace(s, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0) if row < drafts else s


class RejectionOffByFactor(ReferenceEngine):
    """Accepts a draft with ``min(1, 1.15 p(x))``."""

    method = "ngram+acceptance-x1.15"

    def accept_probability(self, p_draft: torch.Tensor) -> torch.Tensor:
        return (1.15 * p_draft).clamp(max=1.0)


class SwappedMixedSettings(ReferenceEngine):
    """Verify steps process request ``b``'s rows with request ``b + 1``'s settings."""

    method = "ngram+swapped-settings"

    def row_sampling(self, batch, b, row, drafts):
        return batch[(b + 1) % len(batch)] if drafts else batch[b]


MUTANTS: "MappingProxyType[str, type[ReferenceEngine]]" = MappingProxyType({
    "wrong_temperature_on_drafts": WrongTemperatureOnDrafts,
    "penalty_ignored_on_drafts": PenaltyIgnoredOnDrafts,
    "rejection_off_by_factor": RejectionOffByFactor,
    "swapped_mixed_settings": SwappedMixedSettings,
})
"""Name -> mutant engine class (read-only)."""

FLAGGED_BY: "MappingProxyType[str, str]" = MappingProxyType({
    "wrong_temperature_on_drafts": "temperature",
    "penalty_ignored_on_drafts": "repetition_penalty",
    "rejection_off_by_factor": "temperature",
    "swapped_mixed_settings": "mixed",
})
"""Mutant name -> the setting (:data:`~specdec.conformance.audit.settings.SETTINGS`) it must be flagged on."""
