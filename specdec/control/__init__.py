"""How much to draft now: every policy implements :class:`.interface.DraftController`: :mod:`.sizer`
(tree nodes from the verify-cost curve), :mod:`.load_gate`, :mod:`.cost_gate`, :mod:`.model_gate`
(the hybrid's EAGLE part), :mod:`.batch_schedule` (vLLM's batch-size table) and the fixed budgets of
:mod:`.interface`."""
