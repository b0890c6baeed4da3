"""Acceptance replays: proposers drafting along the target's recorded greedy answers (no verify forwards)."""
