"""The goodput goal held to another planned configuration, on paired rounds already measured.

``schedule_tax.py`` serves every configuration on the same arrivals round by round, so which one is
"planned" is only a label on the rounds: when a new plan answers with another configuration that
those rounds served, its goal (at least ``plan_goodput.GOAL`` x every other configuration, run by
run, ``plan_goodput.verdict``'s exact one-sided signed-rank tests) can be read from them with
nothing served again. ``--pool`` also joins the rounds of every folder at the same load that served
the planned configuration with the same ``speculative_config`` (a name such as
``custom_class:sched`` is one table in one folder and another in the next), against the
configurations all of them served alike (each folder's rounds on their own arrivals).

    python -m benchmarks.vllm.reverdict --planned ngram:4 \
        benchmarks/results/vllm-rounds-0316-s410 benchmarks/results/vllm-rounds-r11i-0316
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.vllm import plan_goodput as pg
from benchmarks.vllm.schedule_tax import pooled


def rounds(folder: Path) -> dict[float, dict[str, dict]]:
    """``{rate: {configuration: row}}`` of a ``schedule_tax.py`` folder (rows that served a score)."""
    out: dict[float, dict[str, dict]] = {}
    for r in json.loads((folder / "schedule_tax.json").read_text())["rows"]:
        if "score" in r:
            out.setdefault(float(r["rate"]), {})[r["config"]] = r
    return out


def verdicts(folders: list[Path], planned: str, pool: bool = False) -> list[str]:
    """One line per folder and load the planned configuration was served at, and with ``pool`` one
    per load joining every folder's rounds there. ValueError when no folder served ``planned``."""
    found = [(f, rate, here) for f in folders for rate, here in rounds(f).items() if planned in here]
    if not found:
        raise ValueError(f"no folder among {[str(f) for f in folders]} served {planned!r}")
    lines = [f"- {f} at {rate:.3g} req/s: {pg.verdict(here, planned)}" for f, rate, here in found]
    if pool:
        groups: dict[tuple[float, str], list[dict]] = {}
        for _, rate, here in found:  # only rounds of the same planned configuration join
            groups.setdefault((rate, json.dumps(here[planned].get("speculative_config"))), []).append(here)
        for (rate, _), sets in sorted(groups.items()):
            if len(sets) < 2:
                continue
            common = {n for n in set.intersection(*(set(h) for h in sets))
                      if all(h[n].get("speculative_config") == sets[0][n].get("speculative_config") for h in sets)}
            joined: dict = {}
            for here in sets:
                joined = pooled({n: here[n] for n in common}, joined)
            lines.append(f"- {len(sets)} folders joined at {rate:.3g} req/s: {pg.verdict(joined, planned)}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path, help="schedule_tax.py output folders")
    ap.add_argument("--planned", required=True, help="the configuration to hold to the goal, as the rows name it")
    ap.add_argument("--pool", action="store_true", help="also join every folder's rounds at each load")
    args = ap.parse_args(argv)
    missing = [str(f) for f in args.folders if not (f / "schedule_tax.json").is_file()]
    if missing:
        ap.error(f"not a schedule_tax.py folder (no schedule_tax.json): {', '.join(missing)}")
    try:
        print("\n".join(verdicts(args.folders, args.planned, args.pool)))
    except ValueError as exc:
        ap.error(str(exc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
