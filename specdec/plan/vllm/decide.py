"""One pool's decision: which measured configuration to serve it with, and why, in one sentence.

A speculating candidate is **eligible** when at every load it keeps at least ``1 - max_loss`` of
off's score and somewhere gains ``min_gain`` score or, in a latency pool, ``min_tpot_gain`` median
time per output token. A throughput pool buys good tokens/s: its objectives already count every
request a faster token brings under them, and a lower TPOT beyond them is latency the pool did not
ask for, bought with the compute, memory and lifecycle a drafter costs (speculation is a latency
instrument, not a capacity one). Two kinds of load are read apart:

* **overloaded**: neither the candidate nor off keeps up (``sustained`` false in both rows: a queue
  that grows with every request). Both scores then measure how long the simulated overload lasted,
  not the configuration, so a gain there is no reason to speculate (the remedy is capacity or
  admission control: speculation is a latency instrument, not a capacity one). A drafter that serves
  the overload slower than off deepens it, at a load the pool's own range says it sees, so there a
  loss in output tokens/s served counts (the rate the queue is worked off at, not the score, whose
  ratio at an overload swings with the draw of arrivals) when it exceeds both ``max_loss`` and the
  ``overload_floor`` the plan can tell from noise (its bursts, :mod:`.burst_noise`, and the machine's
  drift, :mod:`.drift`): the overload's steps come from those bursts alone. A load one of the two
  sustains counts both ways.
* **past collapse**: off keeps less than ``collapsed`` of its best score (almost no request meets
  the objective): a ratio of two near-zero scores there is noise.

A candidate with no load left to count is not eligible. Among the eligible, the **top tier** is those
within ``max_loss`` of the best candidate at every counted load (``worst_vs_best >= 1 - max_loss``:
predictions closer than that are ties the prediction cannot rank, and any of them serves the pool
within the tolerance the plan is held to); when none is, the highest worst-case ratio alone. Within
the tier a latency pool takes the largest cut in median time per token (two decimals: the latency
it speculates for), a throughput pool the larger gain (three decimals); then the lighter lifecycle
(bound to nothing, the tokenizer, the target), then the smaller K, then the higher worst-case ratio.
None eligible: off. Candidates whose greedy outputs differed from off's are never eligible.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from .calibrate import Calibration
from .candidates import LOOKUP, Candidate
from .pool_spec import OBJECTIVES

_LIFECYCLE = {"nothing": 0, "tokenizer": 1, "target": 2}


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """What the decision requires (recorded for the review, which applies the same ones)."""

    min_gain: float = 0.03
    min_tpot_gain: float = 0.10
    max_loss: float = 0.02
    tolerance: float = 0.15  # review: acceptance or traffic-mix drift that asks for a new plan
    speed: float = 0.25  # review: off's decode step this much slower or faster (either way) asks for a new plan
    margin: float = 0.02  # schedule: the gain a batch size needs before K > 0 is written for it
    collapsed: float = 0.05  # a load where off keeps less than this share of its best score counts for nothing

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not 0 <= v < 1:
                raise ValueError(f"threshold {f.name} must be in [0, 1), got {v}")


@dataclasses.dataclass
class Assessment:
    """One candidate against off and the best, over the pool's load levels."""

    name: str
    worst_vs_off: float  # the score's ratio where a load counts both ways, output tokens/s's at an overload
    worst_vs_best: float  # the score's ratio to the best candidate's, over the loads counted both ways
    gain: float
    tpot_gain: float
    gain_rate: float
    loss_rate: float
    eligible: bool
    why_not: str
    overloaded: tuple[float, ...] = ()  # rates neither it nor off sustains (a loss counts there, a gain does not)
    counted: bool = True  # False: no load was left to count; the ratios are 0 only to rank it last


@dataclasses.dataclass
class Decision:
    pool: str
    chosen: Candidate
    sentence: str
    assessments: dict[str, Assessment]

    @property
    def config(self) -> dict | None:
        return self.chosen.config


def assess(name: str, rows: list[dict], off: list[dict], best: list[float], t: Thresholds, objective: str,
           exact: bool, overload_floor: float = 0.0) -> Assessment:
    """``rows``, ``off``: predicted rows (:func:`~.predict.predict`'s, ``sustained`` included) at the same
    rates; ``best``: the best score at each rate; ``objective``: the pool's, a key of :data:`~.pool_spec.OBJECTIVES`;
    ``overload_floor``: the loss at an overload the measurement can tell from noise (module docstring)."""
    unit = OBJECTIVES[objective]
    over = [i for i, (r, o) in enumerate(zip(rows, off)) if not (r["sustained"] or o["sustained"])]
    key = ["throughput_tok_s" if i in over else "score" for i in range(len(rows))]  # what a loss is read from
    ratio_off = [r[k] / o[k] if o[k] > 0 else (1.0 if r[k] >= 0 else 0.0) for r, o, k in zip(rows, off, key)]
    ratio_best = [r["score"] / b if b > 0 else 1.0 for r, b in zip(rows, best)]
    tpot = [1.0 - r["tpot_p50"] / o["tpot_p50"] if o["tpot_p50"] > 0 else 0.0 for r, o in zip(rows, off)]
    peak = max(o["score"] for o in off)
    served = [i for i, o in enumerate(off) if o["score"] >= t.collapsed * peak]
    live = [i for i in served if i not in over]  # counted both ways
    bar = max(t.max_loss, overload_floor)
    deepened = [i for i in over if ratio_off[i] < 1.0 - bar]  # an overload it serves slower, beyond the noise
    overloaded = tuple(rows[i]["rate"] for i in over)
    if not live and not deepened:  # nothing to compare: ratios of 0 so that any ranking of candidates puts it last
        return Assessment(name, 0.0, 0.0, 0.0, 0.0, rows[0]["rate"], rows[0]["rate"], False,
                          "neither it nor off keeps up with any load of the pool's range that off serves: the pool "
                          "needs capacity, not speculation", overloaded, counted=False)
    i_gain = max(live, key=lambda i: ratio_off[i], default=None)
    i_loss = min(live + deepened, key=lambda i: ratio_off[i])
    gain = 0.0 if i_gain is None else ratio_off[i_gain] - 1.0
    tpot_gain = max((tpot[i] for i in live), default=0.0)
    worst = ratio_off[i_loss]
    why = ""
    if not exact:
        why = "its greedy outputs differed from off's"
    elif worst < 1.0 - t.max_loss and i_loss in deepened:
        beyond = (f" (losses up to {bar:.0%} there are within the measurement's noise)"
                  if overload_floor > t.max_loss else "")
        why = (f"it serves {1 - worst:.0%} fewer output tokens/s at {rows[i_loss]['rate']:.3g} req/s, where neither "
               f"it nor off keeps up: it deepens the overload{beyond}")
    elif worst < 1.0 - t.max_loss:
        why = f"it loses {1 - worst:.0%} {unit} at {rows[i_loss]['rate']:.3g} req/s"
    elif gain < t.min_gain and objective == "throughput":
        why = (f"it gains at most {gain:+.1%} {unit} (needs {t.min_gain:.0%}; a throughput pool is not bought "
               f"latency: median time per token {-tpot_gain:+.0%} at best)")
    elif gain < t.min_gain and tpot_gain < t.min_tpot_gain:
        why = (f"it gains at most {gain:+.1%} {unit} and changes median time per token by {-tpot_gain:+.0%} at "
               f"best (needs {t.min_gain:.0%} more, or {t.min_tpot_gain:.0%} less)")
    gain_rate = rows[i_loss if i_gain is None else i_gain]["rate"]
    return Assessment(name, worst, min((ratio_best[i] for i in live), default=worst), gain, tpot_gain, gain_rate,
                      rows[i_loss]["rate"], not why, why, overloaded)


def decide(pool: str, objective: str, candidates: Mapping[str, Candidate], predictions: Mapping[str, list[dict]],
           cals: Mapping[str, Calibration], exact: Mapping[str, bool], latency_bound_below: Mapping[str, int],
           t: Thresholds, max_rows: int | None = None, overload_floor: float = 0.0) -> Decision:
    """The decision for one pool (module docstring). ``predictions`` must hold "off" and share its rates;
    ``latency_bound_below[name]``: the batch size up to which the candidate's drafts pay; ``max_rows``:
    the server's ``max_num_seqs``; ``overload_floor``: :func:`assess`'s."""
    if "off" not in predictions:
        raise ValueError(f"pool {pool!r}: off was not measured, so nothing can be decided")
    rates = [r["rate"] for r in predictions["off"]]
    for name, rows in predictions.items():
        if [r["rate"] for r in rows] != rates:
            raise ValueError(f"pool {pool!r}: {name} was predicted at other rates than off")
    if objective not in OBJECTIVES:
        raise ValueError(f"pool {pool!r}: objective must be one of {list(OBJECTIVES)}, got {objective!r}")
    unit = OBJECTIVES[objective]
    best = [max(rows[i]["score"] for rows in predictions.values()) for i in range(len(rates))]
    off = predictions["off"]
    found = {name: assess(name, rows, off, best, t, objective, exact.get(name, True), overload_floor)
             for name, rows in predictions.items() if name != "off"}
    eligible = [a for a in found.values() if a.eligible]
    if not eligible:
        return Decision(pool, candidates["off"], _off_sentence(found, unit, t), found)
    top = max(eligible, key=lambda a: preference(a, candidates[a.name], objective, t))
    cand = candidates[top.name]
    return Decision(pool, cand, _on_sentence(cand, top, cals.get(top.name), latency_bound_below.get(top.name, 0),
                                             unit, max_rows), found)


def preference(a: Assessment, candidate: Candidate, objective: str, t: Thresholds) -> tuple:
    """Sort key over assessments, larger preferred: eligible first, then the top tier ranked as the
    module docstring says, then the rest by their worst-case ratio to the best."""
    tier = a.worst_vs_best >= 1.0 - t.max_loss
    what = round(a.tpot_gain, 2) if objective == "latency" else round(a.gain, 3)
    return (a.eligible, tier, what if tier else a.worst_vs_best, -_LIFECYCLE[candidate.bound_to], -candidate.k,
            a.worst_vs_best)


def describe(c: Candidate) -> str:
    """``ngram (K = 4)`` / ``suffix (K = 4 at 1-6 running requests, 2 at 7-9, off above)``."""
    if c.schedule is None:
        return f"{c.method} (K = {c.k})"
    parts = []
    for start, end, k in c.schedule:
        span = f"{start}" if start == end else f"{start}-{end}"
        parts.append(f"off above {start - 1}" if k == 0 else f"K = {k} at {span} running requests")
    return f"{c.method} ({', '.join(parts)})"


def _on_sentence(c: Candidate, a: Assessment, cal: Calibration | None, bound_below: int, unit: str,
                 max_rows: int | None) -> str:
    what = "copy-heavy" if c.method in LOOKUP else "well predicted by the drafter"
    acc = "" if cal is None else f" ({cal.accepted_per_draft:.2f} drafted tokens accepted per drafting step)"
    if max_rows is not None and bound_below >= max_rows:
        where = f"latency-bound at every batch size the server runs (up to {max_rows} requests)"
    elif bound_below >= 1:
        where = f"latency-bound below {bound_below + 1} concurrent requests"
    else:
        where = "latency-bound at the loads where it gains"
    gain = f"up to {a.gain:+.0%} {unit} (at {a.gain_rate:.3g} req/s)" if round(a.gain, 2) > 0 else f"{unit} as off's"
    return (f"speculate with {describe(c)}: {what}{acc} and {where}; {gain}, median time per token "
            f"{-a.tpot_gain:+.0%} at best, never below {a.worst_vs_off:.2f}x off")


def _off_sentence(found: Mapping[str, Assessment], unit: str, t: Thresholds) -> str:
    if not found:
        return "no speculation: no speculating configuration could be measured on this pool"
    best = max(found.values(), key=lambda a: (a.eligible, a.worst_vs_off, a.gain))
    kind = "cost-bound" if best.worst_vs_off < 1.0 - t.max_loss else "nothing to gain"
    return f"{kind}: no speculation; the best candidate, {best.name}, is refused because {best.why_not}"
