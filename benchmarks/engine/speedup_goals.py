"""Engine benchmark against the issue's goals, all measured in one run (SmolLM2-135M, CPU, greedy).

    nice python -m benchmarks.engine.speedup_goals --per-category 2 --max-new-tokens 64 --threads 2

Every ``specdec bench`` option passes through (``--proposers``, ``--no-hf-generate``, ...), so
any ``specdec bench`` figure in docs/ can be rerun with this script plus the goal checks.

Runs ``specdec bench`` (plain specdec decoding, model.generate, HF prompt lookup, the suffix
proposer with the measured cost model; interleaved per prompt) and then checks:

* plain specdec decoding within 5% of ``model.generate`` (tokens/s, overall);
* suffix >= 0.97x plain on every category, >= HF prompt lookup on every category, >= 1.35x overall
  (each method's speedup is over its own stack's plain decoding: suffix over specdec plain, HF
  prompt lookup over ``model.generate``; tokens/s side by side are printed too);
* zero output mismatches against plain greedy decoding.

Prints one line per goal (MET / MISSED with the numbers) after the tables.
"""

import sys

from specdec.cli import build_parser


def check(table) -> list[str]:
    lines = []
    overall = table["overall"]
    if "hf_generate" in overall:  # absent with --no-hf-generate
        ratio = overall["plain"].tokens_per_s / overall["hf_generate"].tokens_per_s
        lines.append(
            f"{'MET' if ratio >= 0.95 else 'MISSED'}: plain specdec = {ratio:.3f}x model.generate (goal >= 0.95)"
        )
    for cat, rows in sorted(table.items()):
        s, lookup = rows["suffix"], rows.get("hf_prompt_lookup")
        ok = s.speedup >= 0.97 and (lookup is None or s.speedup >= lookup.speedup)
        ref = (
            f", HF lookup {lookup.speedup:.2f}x ({s.tokens_per_s:.1f} vs {lookup.tokens_per_s:.1f} tokens/s)"
            if lookup
            else ""
        )
        lines.append(f"{'MET' if ok else 'MISSED'}: {cat}: suffix {s.speedup:.2f}x plain{ref}")
    lines.append(
        f"{'MET' if overall['suffix'].speedup >= 1.35 else 'MISSED'}: overall suffix "
        f"{overall['suffix'].speedup:.2f}x (goal >= 1.35x)"
    )
    bad = sum(r.mismatches for r in overall.values() if r.method in ("plain", "suffix", "hf_generate"))
    lines.append(f"{'MET' if bad == 0 else 'MISSED'}: {bad} greedy output mismatches among exact methods")
    return lines


def main(argv=None):
    from specdec.cli import bench

    argv = list(sys.argv[1:] if argv is None else argv)
    table = bench.execute(build_parser().parse_args(["bench", *argv]))
    for line in check(table):
        print(line)


if __name__ == "__main__":
    main()
