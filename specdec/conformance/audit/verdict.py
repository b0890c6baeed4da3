"""One case's verdict from its tests, its acceptance and its power (:data:`VERDICTS`, defined in docs/audit.md).

``biased`` carries a scope: ``speculation`` (the arms differ, or only the speculative arm fails), ``engine``
(the plain arm fails too and the arms agree), ``unsplit`` (the speculative arm fails, the plain one did not run).
"""

from __future__ import annotations

from dataclasses import dataclass

VERDICTS = ("exact", "biased", "refused", "error", "inconclusive")


@dataclass(frozen=True)
class Verdict:
    """``verdict`` (one of :data:`VERDICTS`), ``scope`` for biased cases, and the reason in words."""

    verdict: str
    scope: str | None
    reason: str

    @property
    def passed(self) -> bool:
        return self.verdict == "exact"


def decide(*, spec_rejected: bool, plain_rejected: bool, two_rejected: bool, plain_ran: bool,
           accepted_per_request: float | None, min_accepted: float, min_tv: float | None,
           max_tv: float) -> Verdict:
    """The verdict of a case whose speculative arm ran (refusals and errors are decided before)."""
    if spec_rejected and not plain_ran:
        return Verdict("biased", "unsplit", "the speculative arm fails the exact law; the plain arm did not run, so "
                                            "speculation and the engine's own sampling cannot be told apart")
    if two_rejected or (spec_rejected and not plain_rejected):
        why = "the speculative arm differs from the plain arm" if two_rejected else \
            "the speculative arm fails the exact law while the plain arm passes"
        return Verdict("biased", "speculation", why)
    if plain_rejected:
        both = "both arms fail" if spec_rejected else "the plain arm fails"
        return Verdict("biased", "engine", f"{both} the exact law and the arms do not differ: the engine's own "
                                           "sampling (or the processing order the law assumes) is off, with or "
                                           "without speculation")
    if accepted_per_request is None:
        return Verdict("inconclusive", None, "the engine did not report accepted drafts: nothing shows the "
                                             "rejection path ran")
    if accepted_per_request < min_accepted:
        return Verdict("inconclusive", None, f"{accepted_per_request:.3f} accepted draft tokens per request "
                                             f"(< {min_accepted}): too few to exercise the rejection path")
    if min_tv is None or min_tv > max_tv:
        seen = "no perturbation" if min_tv is None else f"only a TV of {min_tv:.3f}"
        return Verdict("inconclusive", None, f"too little power: {seen} was detected (needs <= {max_tv})")
    note = "" if plain_ran else " (the plain arm did not run: no two-sample test)"
    return Verdict("exact", None, f"no test rejected; detects TV >= {min_tv:.3f} with "
                                  f"{accepted_per_request:.2f} accepted drafts per request{note}")
