"""What several benchmarks share: where things live, the recorded greedy answers, verify-cost curves, reporting.

:mod:`.paths` (the checkout's folders and the dev prompts), :mod:`.answers` (recorded greedy
answers: the JSONL file, cached plain-decoding outputs, teacher-forced hidden states),
:mod:`.cost_curve` (a verify-cost curve given on the command line or measured), :mod:`.report`
(paired bootstrap intervals, acceptance by depth, JSON output). The replay loop itself is the
library's: :mod:`specdec.measure.greedy_replay`.
"""
