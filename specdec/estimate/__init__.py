"""Estimates the controllers and planners read: step-cost fits and acceptance estimates.

:mod:`.fit` is the one least-squares routine every cost model fits with (non-negative weights:
a cost term never pays for itself).
"""
