#!/usr/bin/env python3
"""Benchmark a change against the code before it: the same benchmarks of both, taking turns, on one machine.

Not a benchmark of its own (so not named bench_*.py: scripts/bench.sh runs each of those): it runs others.

For each named benchmark (tap, calls, workspace, supervisor, ...), this code's `scripts/bench_<name>.py` and the
same script of commit `--before` (extracted with `git archive`, so every worktree stays as it is) run in turns,
`--rounds` times each, with the arguments given after `--`; each run writes its section to a temporary file.
Every row both sides print is then compared on its measured value (the "ours" column): the median of the
rounds on each side, their ratio, and each side's spread ((max - min) / median), so a change counts as worse
only where the medians differ by more than the spread. Writes docs/bench/before.md (and .json: its rows, for
scripts/bench.sh's summary).

Usage: scripts/compare_before.py --before COMMIT [--rounds 3] NAME [NAME ...] [-- ARGS FOR EVERY SCRIPT]
    e.g. scripts/compare_before.py --before ec9ac1f tap calls workspace supervisor -- --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchkit as kit  # noqa: E402

def value(cell: str) -> tuple[float, str] | None:
    """A row's measured value as a number in its unit (seconds for times), or None for a cell without one."""
    parsed = kit._number(cell)
    if parsed is None:
        return None
    number, unit = parsed
    if unit in kit._SECONDS:
        return number * kit._SECONDS[unit], "s"
    return number, unit


def run_once(root: Path, name: str, args: list[str], out: Path) -> dict[str, tuple[float, str]]:
    """One run of `root`'s bench_<name>.py; its rows' measured values by metric."""
    script = root / "scripts" / f"bench_{name}.py"
    subprocess.run([sys.executable, str(script), *args, "--out", str(out)], cwd=root, check=True,
                   stdout=subprocess.DEVNULL)
    rows = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))["rows"]
    found = {}
    for row in rows:
        measured = value(row["ours"])
        if measured is not None:
            found[row["metric"]] = measured
    return found


def spread(values: list[float]) -> float:
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def verdict(ratio: float, noise: float) -> str:
    """Whether the medians differ by more than the larger spread, and which way."""
    if abs(ratio - 1) <= noise:
        return "within the spread"
    return "**higher**" if ratio > 1 else "**lower**"


def show(number: float, unit: str) -> str:
    if unit == "s":
        if number >= 1.0:
            return f"{number:.2f} s"
        return f"{number * 1e3:.1f} ms" if number >= 1e-3 else f"{number * 1e6:.0f} µs"
    text = f"{number:,.0f}" if number == int(number) else f"{number:,.2f}"
    return f"{text} {unit}".rstrip()


def main() -> int:
    argv = sys.argv[1:]
    passed: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, passed = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit before the change")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=kit.DOCS / "before.md")
    parser.add_argument("names", nargs="+")
    opts = parser.parse_args(argv)
    load_start = kit.loadavg()
    before_root = kit.archive(opts.before)
    scratch = kit.temp_dir("before-out")
    this = kit.commit()
    sections = []
    rows: list[kit.Row] = []
    try:
        for name in opts.names:
            runs: dict[str, list[dict[str, tuple[float, str]]]] = {"this": [], "before": []}
            for round_no in range(opts.rounds):
                for side, root in (("this", kit.ROOT), ("before", before_root)):
                    print(f"== {name} round {round_no + 1}/{opts.rounds}: {side}", flush=True)
                    runs[side].append(run_once(root, name, passed, scratch / f"{name}-{side}-{round_no}.md"))
            lines = [f"### {name}", "", "| metric | this code | before | ratio | spread this / before | "
                     "difference |", "|---|---|---|---|---|---|"]
            for metric, (_, unit) in runs["this"][0].items():
                ours = [r[metric][0] for r in runs["this"] if metric in r]
                base = [r[metric][0] for r in runs["before"] if metric in r]
                if len(ours) != opts.rounds or len(base) != opts.rounds:
                    continue  # a row the code before does not have (or only sometimes prints)
                m_ours, m_base = statistics.median(ours), statistics.median(base)
                ratio = m_ours / m_base if m_base else (1.0 if m_ours == 0 else float("inf"))
                noise = max(spread(ours), spread(base))
                rows.append(kit.Row(f"{name}: {metric}, this code vs {opts.before}", show(m_ours, unit),
                                    show(m_base, unit), f"{ratio:.2f}", "(for reference)"))
                lines.append(f"| {metric} | {show(m_ours, unit)} | {show(m_base, unit)} | {ratio:.2f} | "
                             f"{spread(ours):.0%} / {spread(base):.0%} | {verdict(ratio, noise)} |")
            sections.append("\n".join(lines))
    finally:
        kit.cleanup()
    header = (f"## Before and after: this code ({this}) against {opts.before}\n\n"
              f"Machine: {kit.machine_line()}; load average {load_start:.1f} at the start, {kit.loadavg():.1f} at "
              f"the end (`scripts/compare_before.py`). Each benchmark ran {opts.rounds} times on each side, taking turns, with "
              f"`{' '.join(passed) or '(no arguments)'}`; each cell is the median of the rounds' measured values "
              "(a row's own \"ours\" column, whatever its own baseline). Which way is better depends on the row "
              "(a time or CPU share: lower; a throughput: higher). The last column says where the medians differ "
              "by more than the larger of the two spreads, and which way.\n")
    kit.publish(opts.out.stem, header + "\n" + "\n\n".join(sections), rows, opts.out, load_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
