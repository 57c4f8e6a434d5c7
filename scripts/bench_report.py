#!/usr/bin/env python3
"""Benchmark: `ralph-supervise report --html` on long runs, against the floor of reading the same files.

For 1,000 and 10,000 iterations, a state folder is written the way the supervisor writes it
(tests/helpers/synthetic_runs.py: rotated events.jsonl, history with an open, a trial and a close every
100 iterations, ledger, state) in a workspace that is a git repository with 50 commits made during the run.
Then, alternating, median of the rounds:
  - ours: `python -m ralph_supervisor report --html FILE` as a user runs it (Python start-up included),
  - baseline: a `python -c` that only reads and json-parses every line of the same files (the floor any
    report of these files pays),
and the HTML file's size. With `--before DIR` (a checkout of another commit, e.g. `git worktree add DIR main`),
that checkout's `report --html` runs in the same rounds too, so a change to the report is measured against
the code before it side by side. Writes docs/bench/report.md (and .json for scripts/bench.sh's summary).

Usage: scripts/bench_report.py [--quick] [--rounds N] [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts._benchkit import Row, fmt_mib, loadavg, machine_line, table, wait_rusage, write_section  # noqa: E402
from tests.helpers.synthetic_runs import write_run  # noqa: E402

FLOOR = """
import json, pathlib, sys
folder = pathlib.Path(sys.argv[1])
n = 0
for path in sorted(folder.glob("*.jsonl*")):
    for line in path.read_bytes().splitlines():
        json.loads(line); n += 1
json.loads((folder / "ledger.json").read_bytes()); json.loads((folder / "state.json").read_bytes())
print(n)
"""


def workspace_with_commits(root: Path, start: float, commits: int) -> Path:
    ws = root / "proj"
    ws.mkdir()
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@example.com", GIT_COMMITTER_NAME="bench",
               GIT_COMMITTER_EMAIL="b@example.com")
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)

    def commit(at: float, n: int) -> None:
        (ws / f"file{n % 20}.txt").write_text(f"change {n}\n" * (n + 1))
        subprocess.run(["git", "add", "-A"], cwd=ws, check=True)
        stamp = f"@{int(at)} +0000"
        subprocess.run(["git", "commit", "-q", "-m", f"step {n}"], cwd=ws, check=True,
                       env=dict(env, GIT_AUTHOR_DATE=stamp, GIT_COMMITTER_DATE=stamp))

    commit(start - 3600, 0)
    for n in range(1, commits + 1):
        commit(start + 60 * n, n)
    return ws


def timed(argv: list[str], root: Path = ROOT) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run of `argv`, with the package of `root`."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(root)))
    code, usage = wait_rusage(proc, timeout=600)
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"bench_report: {argv[:4]} exited {code}: {proc.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
    return wall, usage.ru_maxrss / 1024


def measure(iterations: int, rounds: int, before: Path | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ralph-bench-report-") as tmp:
        start = 1796100000.0
        ws = workspace_with_commits(Path(tmp), start, 50)
        state_dir = ws / ".ralph-supervise"
        write_run(state_dir, iterations, start=start, workspace=str(ws))
        html = Path(tmp) / "report.html"
        ours_argv = [sys.executable, "-m", "ralph_supervisor", "report", "-w", str(ws), "--html", str(html)]
        floor_argv = [sys.executable, "-c", FLOOR, str(state_dir)]
        ours, floor, rss, earlier = [], [], [], []
        for _ in range(rounds):
            wall, peak = timed(ours_argv)
            ours.append(wall)
            rss.append(peak)
            floor.append(timed(floor_argv)[0])
            if before is not None:
                earlier.append(timed([*ours_argv[:-1], str(html.with_name("before.html"))], before)[0])
        files = sum(p.stat().st_size for p in state_dir.iterdir())
        result = {"ours": statistics.median(ours), "floor": statistics.median(floor), "rss": max(rss),
                  "html": html.stat().st_size, "files": files,
                  "spread": (max(ours) - min(ours)) / statistics.median(ours)}
        if earlier:
            result["before"] = statistics.median(earlier)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 5")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--before", type=Path, default=None, help="a checkout of another commit, timed alongside")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 5)
    load = loadavg()
    before = args.before.resolve() if args.before else None
    commit = ""
    if before is not None:
        commit = subprocess.run(["git", "-C", str(before), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or before.name
    results = {n: measure(n, rounds, before) for n in (1000, 10000)}
    rows: list[Row] = []
    for n, r in results.items():
        target = "< 2 s" if n == 1000 else "(for reference)"
        rows.append(Row(f"`report --html`, {n:,} iterations: wall time, Python start-up included (median)",
                        f"{r['ours']:.2f} s", f"{r['floor']:.2f} s (read + json-parse the files)",
                        f"{r['ours'] / r['floor']:.2f}", target, (r["ours"] < 2.0) if n == 1000 else None))
        rows.append(Row(f"report.html size, {n:,} iterations", f"{r['html'] / 1e6:.2f} MB",
                        f"{r['files'] / 1e6:.2f} MB (the state files)", f"{r['html'] / r['files']:.2f}",
                        "< 2 MB" if n == 1000 else "(for reference)", (r["html"] < 2e6) if n == 1000 else None))
        rows.append(Row(f"`report` peak RSS, {n:,} iterations (worst run)", fmt_mib(r["rss"]), "", "",
                        "(for reference)"))
        if "before" in r:
            rows.append(Row(f"`report --html`, {n:,} iterations: this code against {commit} (median)",
                            f"{r['ours']:.2f} s", f"{r['before']:.2f} s ({commit})", f"{r['ours'] / r['before']:.2f}",
                            f"<= 1 + spread ({r['spread']:.2f})", r["ours"] / r["before"] <= 1 + r["spread"]))
    before_note = (f"\n`{commit}`'s `report --html` runs in the same rounds (the code before a change); the spread is"
                   " ours' (max - min) / median over the rounds.") if commit else ""
    markdown = f"""## Report

`ralph-supervise report --html FILE` on state folders written the way the supervisor writes them
(`tests/helpers/synthetic_runs.py`: 1,000 and 10,000 iterations, an open, a trial and a close every 100,
replies, errors, usage limits, costs), in a workspace that is a git repository with 50 commits made during
the run (the report asks git for them and the diffstat). Ours and the baseline alternate, {rounds} rounds each,
median; both are whole processes as a user starts them. The baseline only reads and json-parses every line
of the same files: the floor any report of them pays.{before_note}

{table(rows)}

Machine: {machine_line()}. Load average (1 min) {load:.2f} at the start, {loadavg():.2f} at the end: the
machine was shared with other work while this ran, so the ratios say more than the absolute times.
The HTML holds every iteration in the plot (uPlot, 51 KB of it) and the newest 1,000 as table rows.
"""
    path = write_section("report", markdown, rows)
    print(path.read_text())


if __name__ == "__main__":
    main()
