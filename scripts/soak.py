#!/usr/bin/env python3
"""Soak: a fast fake loop for 10,000 iterations under the real supervisor; memory, fds and files stay bounded.

The loop is `examples/fast_loop.sh`: each iteration prints a marker line, stream-json events and a result
with token usage, and rewrites one of 20 files (so every iteration is progress and the breaker stays
CLOSED). The supervisor runs in marker mode (`--iteration-marker '^\\[fast-loop\\] iteration '`), which counts
an iteration at every marker line however short it is; in the default process mode an iteration is the
life of a `claude` process, which the tree sampler (every 0.1 s) only sees reliably when a call lives
>= ~0.3 s, i.e. about an hour for 10,000 iterations (`--mode process` runs that, with examples/ralph_loop.sh
and the fake claude).

child.log gets a small budget (256 KiB files, 1 MiB in all) so its rotation is exercised many times over.

Sampled every second: the supervisor's RSS (VmRSS), its open fds (/proc/PID/fd) and the iteration in
state.json. Checks: exit 0; state.json counts every iteration and stays CLOSED; RSS flat (the last tenth
of the run within 10 % or 4 MiB of the second tenth) and below 80 MiB; the fewest open fds in the last tenth
no more than in the second tenth (a leak raises that floor), and no sample more than TRANSIENT_FDS above it;
child.log, events.jsonl and history.jsonl within their budgets.
Runtime: about 10,000 x (FAST_LOOP_SLEEP 0.02 s + the supervisor's work per iteration); see the report.

Usage: scripts/soak.py [--quick] [--iterations N] [--sleep S] [--mode marker|process] [--out docs/bench/soak.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _benchkit as kit  # noqa: E402
from ralph_supervisor.state_folder import default_state_dir  # noqa: E402 - the state is outside the workspace

MARKER = r"^\[fast-loop\] iteration "
RSS_LIMIT_MIB = 80.0
HELPER_FDS = 8
"""A git helper of the snapshots while it starts: stdin, stdout and stderr pipes and Popen's exec-status pipe,
two ends each, for a moment (seen: 15 pipes at the peak where 7 are always open)."""
TRANSIENT_FDS = 4 + HELPER_FDS
"""A sample may catch files open for a moment (state.json being written, a /proc read, a new call's pipes,
a snapshot's git starting)."""
CHILD_LOG_MAX = 256 * 1024
CHILD_LOG_TOTAL = 1024 * 1024
EVENTS_TOTAL = 50_000_000  # ralph_supervisor.logging.EVENTS_TOTAL_BYTES
HISTORY_TOTAL = 5_000_000  # ralph_supervisor.supervisor.HISTORY_TOTAL_BYTES


@dataclass
class Point:
    t: float
    iteration: int
    rss_mib: float
    fds: int


@dataclass
class SoakResult:
    iterations: int
    mode: str
    seconds: float
    exit_code: int | None
    points: list[Point] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    unattributed: int = 0
    """Iterations reported with no file change (the loop changes a file in every one)."""
    load_start: float = 0.0
    load_end: float = 0.0

    # ------------------------------------------------------------------ derived

    def rss_at(self, fraction: float) -> float:
        """Median RSS of the samples in the tenth of the run (by iteration) that starts at `fraction`."""
        lo, hi = self.iterations * fraction, self.iterations * (fraction + 0.1)
        window = [p.rss_mib for p in self.points if lo <= p.iteration < hi or (fraction >= 0.9 and p.iteration >= lo)]
        return statistics.median(window) if window else float("nan")

    @property
    def rss_start(self) -> float:
        return self.points[0].rss_mib if self.points else float("nan")

    @property
    def rss_end(self) -> float:
        return self.points[-1].rss_mib if self.points else float("nan")

    @property
    def rss_max(self) -> float:
        return max((p.rss_mib for p in self.points), default=float("nan"))

    def _fds_floor(self, lo: float, hi: float) -> int:
        window = [p.fds for p in self.points if lo <= p.iteration < hi]
        return min(window) if window else -1

    @property
    def fds_start(self) -> int:
        """Open fds once the loop runs: the fewest seen in the second tenth (the watcher, the pipes, the socket
        and the log files are open by then; a sample may also catch a file being written or read)."""
        return self._fds_floor(self.iterations * 0.1, self.iterations * 0.2)

    @property
    def fds_end(self) -> int:
        """The fewest open fds in the last tenth, before the last iteration (then the run ends and closes its
        pipes). A leaked fd stays open, so a leak raises this floor; the most seen moves with whatever file
        happens to be open at the sample."""
        return self._fds_floor(self.iterations * 0.9, self.iterations)

    @property
    def fds_max(self) -> int:
        return max((p.fds for p in self.points), default=-1)

    @property
    def counted(self) -> int:
        return int(self.state.get("iteration", 0) or 0)

    @property
    def rss_growth_ok(self) -> bool:
        early, late = self.rss_at(0.1), self.rss_at(0.9)
        return late <= early + max(4.0, early * 0.10)

    @property
    def rss_flat(self) -> bool:
        return self.rss_growth_ok and self.rss_max < RSS_LIMIT_MIB

    @property
    def fds_floor_ok(self) -> bool:
        return 0 <= self.fds_end <= self.fds_start

    @property
    def fds_spikes_ok(self) -> bool:
        return self.fds_max <= self.fds_start + TRANSIENT_FDS

    @property
    def fds_flat(self) -> bool:
        return self.fds_floor_ok and self.fds_spikes_ok

    def checks(self) -> list[tuple[str, bool, str]]:
        early, late = self.rss_at(0.1), self.rss_at(0.9)
        return [
            ("exit code 0", self.exit_code == 0, str(self.exit_code)),
            ("state.json counts every iteration", self.counted == self.iterations,
             f"{self.counted:,} of {self.iterations:,}"),
            ("breaker stayed CLOSED", self.state.get("state") == "CLOSED" and not self.state.get("total_opens"),
             f"{self.state.get('state')}, {self.state.get('total_opens', 0)} opens"),
            ("RSS flat (last tenth vs second tenth: +10 % or +4 MiB at most)", self.rss_growth_ok,
             f"{early:.1f} -> {late:.1f} MiB"),
            (f"RSS below {RSS_LIMIT_MIB:.0f} MiB", self.rss_max < RSS_LIMIT_MIB, f"max {self.rss_max:.1f} MiB"),
            ("open fds flat (fewest in the last tenth <= fewest in the second tenth)", self.fds_floor_ok,
             f"{self.fds_start} -> {self.fds_end}"),
            (f"open fds bounded (most at any sample <= {TRANSIENT_FDS} over that floor)", self.fds_spikes_ok,
             f"max {self.fds_max}"),
            ("child.log within its budget", self.files.get("child.log*", 0) <= CHILD_LOG_TOTAL,
             f"{self.files.get('child.log*', 0):,} B <= {CHILD_LOG_TOTAL:,} B"),
            ("events.jsonl within its budget", self.files.get("events.jsonl*", 0) <= EVENTS_TOTAL,
             f"{self.files.get('events.jsonl*', 0):,} B <= {EVENTS_TOTAL:,} B"),
            ("history.jsonl within its budget", self.files.get("history.jsonl*", 0) <= HISTORY_TOTAL,
             f"{self.files.get('history.jsonl*', 0):,} B <= {HISTORY_TOTAL:,} B"),
        ]

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.checks())


def read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def count_without_changes(state_dir: Path) -> int:
    count = 0
    for path in sorted(state_dir.glob("events.jsonl*")):
        with open(path, "rb") as fh:
            for line in fh:
                if b'"iteration_finished"' in line and b'"files_changed": 0,' in line:
                    count += 1
    return count


def run_soak(iterations: int, *, pause: float = 0.02, mode: str = "marker", interval: float = 1.0,
             progress: bool = True) -> SoakResult:
    """Run the fast loop under the supervisor and sample it; every process is stopped before returning."""
    kit.become_subreaper()
    workspace = kit.temp_dir("soak")
    state_dir = default_state_dir(workspace)
    # The soak measures resources, not judgement: with 20 ms iterations a file event can land in the
    # neighbouring iteration (seen under load), so no-progress is off; any other open stops the run at once
    # (instead of pausing it for the 30 min cooldown) and fails the "stayed CLOSED" check.
    flags = ["--log-max-bytes", str(CHILD_LOG_MAX), "--log-total-bytes", str(CHILD_LOG_TOTAL),
             "--no-progress", "1000000", "--on-open", "stop"]
    if mode == "marker":
        child = [str(kit.ROOT / "examples" / "fast_loop.sh")]
        flags += ["--iteration-marker", MARKER]
        env = {"FAST_LOOP_ITERATIONS": str(iterations), "FAST_LOOP_SLEEP": str(pause)}
    else:
        child = [str(kit.ROOT / "examples" / "ralph_loop.sh")]
        env = {"RALPH_LOOP_MAX": str(iterations), "RALPH_LOOP_PAUSE": "0.05", "FAKE_CLAUDE_DELAY": "0.3",
               "FAKE_CLAUDE_SCENARIO": "progress", "FAKE_CLAUDE_COUNTER": str(workspace / ".counter")}
    result = SoakResult(iterations, mode, 0.0, None, load_start=kit.loadavg())
    started = time.monotonic()
    proc = kit.start(kit.supervisor_argv(workspace, child, *flags), env=env)
    next_report = started + 30
    try:
        while proc.poll() is None:
            rss = kit.memory_kib(proc.pid)
            fds = kit.fd_count(proc.pid)
            if rss is not None and fds is not None:
                seen = int(read_state(state_dir / "state.json").get("iteration", 0) or 0)
                result.points.append(Point(time.monotonic() - started, seen, rss[0] / 1024, fds))
                if progress and time.monotonic() >= next_report:
                    next_report += 30
                    print(f"  {time.monotonic() - started:6.0f} s: iteration {seen:,}, RSS {rss[0] / 1024:.1f} MiB, "
                          f"{fds} fds", flush=True)
            time.sleep(interval)
        result.exit_code = proc.returncode
    finally:
        kit.stop_supervisor(proc)
    result.seconds = time.monotonic() - started
    result.load_end = kit.loadavg()
    result.state = read_state(state_dir / "state.json")
    result.unattributed = count_without_changes(state_dir)
    for pattern in ("child.log*", "events.jsonl*", "history.jsonl*", "ledger.json", "state.json"):
        result.files[pattern] = kit.dir_bytes(state_dir, pattern)
    # Drop the samples taken while the supervisor was still starting (before its first iteration).
    running = [p for p in result.points if p.iteration > 0]
    if running:
        result.points = running
    kit.shutil.rmtree(workspace, ignore_errors=True)
    return result


def table_rows(result: SoakResult, label: str = "") -> list[kit.Row]:
    """The soak's rows in a benchmark table (this section's, and the supervisor's iterations rows)."""
    n = result.iterations
    return [
        kit.Row(f"RSS after {n:,} iterations{label}", kit.fmt_mib(result.rss_end),
                kit.fmt_mib(result.rss_at(0.1)) + " at 10 %", f"{result.rss_end / result.rss_at(0.1):.2f}",
                f"flat, < {RSS_LIMIT_MIB:.0f} MiB", result.rss_flat),
        kit.Row(f"open fds in the last tenth of {n:,} iterations (fewest; most at any sample)",
                f"{result.fds_end} ({result.fds_max})", f"{result.fds_start} at 10-20 %", "",
                f"<= early, spikes <= +{TRANSIENT_FDS}", result.fds_flat),
        kit.Row("iterations counted in state.json", f"{result.counted:,}", f"{n:,} printed", "", "all",
                result.counted == n),
    ]


def render(result: SoakResult, quick: bool) -> tuple[str, list[kit.Row]]:
    per_iteration_ms = result.seconds / max(1, result.iterations) * 1000
    rows = table_rows(result)
    check_lines = "\n".join(f"| {name} | {'pass' if ok else '**FAIL**'} | {detail} |" for name, ok, detail in result.checks())
    tenths = " | ".join(f"{result.rss_at(f / 10):.1f}" for f in range(10))
    mode = ("marker mode (`--iteration-marker`), `examples/fast_loop.sh` with FAST_LOOP_SLEEP"
            if result.mode == "marker" else "process mode, `examples/ralph_loop.sh` + fake `claude` (0.3 s calls)")
    md = f"""## Soak: {result.iterations:,} iterations of a fast fake loop

Machine: {kit.machine_line()}; load average {result.load_start:.1f} at the start, {result.load_end:.1f} at the end
(the machine was shared). Mode: {"quick" if quick else "full"}, {mode}.
Runtime: {result.seconds:.0f} s ({per_iteration_ms:.1f} ms per iteration, the loop's own sleep included).
child.log budget for the soak: {CHILD_LOG_MAX // 1024} KiB files, {CHILD_LOG_TOTAL // 1024} KiB in all (so it rotates many times).
Baseline column: the same measure early in the run (RSS: median over the second tenth of the iterations; fds: the
fewest seen in the second tenth).

{kit.table(rows)}

| check | result | detail |
|---|---|---|
{check_lines}

Overall: **{"PASS" if result.passed else "FAIL"}**.

RSS (MiB, median per tenth of the iterations): {tenths}.
Supervisor RSS start / end / max: {result.rss_start:.1f} / {result.rss_end:.1f} / {result.rss_max:.1f} MiB; open fds start / end / max:
{result.fds_start} / {result.fds_end} / {result.fds_max}.
Files at the end: child.log* {result.files.get("child.log*", 0):,} B, events.jsonl* {result.files.get("events.jsonl*", 0):,} B,
history.jsonl* {result.files.get("history.jsonl*", 0):,} B, ledger.json {result.files.get("ledger.json", 0):,} B,
state.json {result.files.get("state.json", 0):,} B.
Iterations reported without a file change: {result.unattributed:,} of {result.iterations:,} (the loop changes a file in
every one: with 20 ms iterations the watcher's events sometimes land in the neighbouring iteration; the no-progress
rule is off for the soak, `--no-progress 1000000`, and `--on-open stop` ends the run on any other open).
"""
    return md, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 iterations")
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--sleep", type=float, default=0.02, help="FAST_LOOP_SLEEP (marker mode)")
    parser.add_argument("--mode", choices=("marker", "process"), default="marker")
    parser.add_argument("--out", type=Path, default=kit.DOCS / "soak.md")
    args = parser.parse_args(argv)
    iterations = args.iterations or (500 if args.quick else 10_000)
    print(f"soak: {iterations:,} iterations, {args.mode} mode", flush=True)
    result = run_soak(iterations, pause=args.sleep, mode=args.mode, interval=0.2 if iterations < 2000 else 1.0)
    md, rows = render(result, args.quick)
    notes_file = args.out.with_name("soak.notes.md")
    if notes_file.exists():
        md += "\n" + notes_file.read_text(encoding="utf-8")
    extra = {"passed": result.passed, "seconds": round(result.seconds, 1), "iterations": iterations,
             "checks": [{"check": n, "ok": ok, "detail": d} for n, ok, d in result.checks()],
             "points": [[round(p.t, 1), p.iteration, round(p.rss_mib, 2), p.fds] for p in result.points]}
    path = kit.write_section("soak", md, rows, args.out, extra)
    print(md)
    print(f"wrote {path}")
    left = kit.leftovers()
    if left:
        print(f"soak: processes left behind: {left} (killing them)", file=sys.stderr)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
