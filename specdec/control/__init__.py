"""How much to draft now: every policy behind one controller interface.

The controllers answer one question each step: how many draft tokens (or tree nodes) are worth
verifying for the running batch, and what a drafted token must be worth (the floor), or off.
:mod:`.base` defines the interface; the policies are :mod:`.sizer` (tree nodes per request from the
measured verify-cost curve), :mod:`.load_gate` (batch-size gate and budget optimizer),
:mod:`.cost_gate` (budget from the engine's own step times), :mod:`.model_gate` (whether the
hybrid's EAGLE part drafts) and the fixed budgets of :mod:`.base`.
"""
