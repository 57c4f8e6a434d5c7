#!/usr/bin/env python3
"""Benchmark stopping and pausing a process tree: ProcessTree against the naive process-group way.

Side by side, on identical freshly started trees (see tests/helpers/trees.py):
  - stop a cooperative 200-process tree (everything obeys SIGTERM),
  - stop a 200-process tree that ignores SIGTERM,
  - stop a Ralph-like loop (TERM-ignoring bash loop leaving a `setsid sleep 1000` behind every turn,
    a double-forked daemon, a setsid'd loopback listener),
  - pause (and resume) 200 processes.
Baseline: `kill -TERM -<pgid>`, wait until the group is empty or the grace is over, `kill -KILL -<pgid>`;
for pause `kill -STOP -<pgid>`. Its survivors (processes in other sessions or groups) are counted, then
killed by us, outside the timing. This script is the child subreaper, so every orphan comes back to it,
and it kills everything it started before it exits.

Usage: scripts/bench_tree.py [--quick] [--out docs/bench/tree.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import _benchkit as kit  # noqa: E402 - the commit the section names

from ralph_supervisor.process.frozen import held  # noqa: E402
from ralph_supervisor.process.linux import read_stat, set_child_subreaper  # noqa: E402
from ralph_supervisor.process.reaper import Reaper  # noqa: E402
from ralph_supervisor.process.spawn import spawn  # noqa: E402
from ralph_supervisor.process.tree import Member, ProcessTree  # noqa: E402
from tests.helpers.trees import hard_tree, wait_for, wide_tree  # noqa: E402

ME = os.getpid()


class Bench:
    def __init__(self) -> None:
        self.reaper = Reaper()
        self.tree = ProcessTree(ME, self.reaper)
        self.pipes: list = []

    def start(self, argv: list[str], cwd: Path, members: int, ready: Callable[[], bool] = lambda: True) -> int:
        proc = spawn(argv, cwd)
        self.reaper.adopt(proc)
        self.pipes += [proc.stdout, proc.stderr]
        wait_for(lambda: len(self.tree.scan()) >= members and ready(), 30, f"{members} members")
        time.sleep(0.05)
        return proc.pid

    def cleanup(self) -> None:
        self.tree.kill_now()
        self.reaper.reap()
        for pipe in self.pipes:
            if pipe is not None:
                pipe.close()
        self.pipes.clear()

    def alive(self, members: list[Member]) -> int:
        count = 0
        for member in members:
            stat = read_stat(member.pid)
            if stat is not None and stat.alive and stat.create_time == member.create_time:
                count += 1
        return count

    def naive_stop(self, pgid: int, grace: float) -> float:
        """`kill -TERM -pgid`, wait for the group to empty (or the grace), `kill -KILL -pgid`."""
        started = time.perf_counter()
        _killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_exists(pgid, self.reaper):
            time.sleep(0.005)
        _killpg(pgid, signal.SIGKILL)
        while _group_exists(pgid, self.reaper):
            time.sleep(0.001)
        return time.perf_counter() - started


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_exists(pgid: int, reaper: Reaper) -> bool:
    reaper.reap()  # the group's zombies are ours (subreaper); reaped they leave the group
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def run_stop(bench: Bench, make: Callable[[Path], list[str]], size: int, grace: float, runs: int,
             ready: Callable[[Path], Callable[[], bool]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ours_s": [], "ours_left": [], "base_s": [], "base_left": [], "members": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            bench.start(make(tmp), tmp, size, ready(tmp))
            before = bench.tree.scan()
            out["members"].append(len(before))
            result = bench.tree.stop(grace)
            out["ours_s"].append(result.duration_ms / 1000)
            out["ours_left"].append(bench.alive(before))
            bench.cleanup()
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            root = bench.start(make(tmp), tmp, size, ready(tmp))
            before = bench.tree.scan()
            out["base_s"].append(bench.naive_stop(root, grace))
            time.sleep(0.05)
            out["base_left"].append(bench.alive(before))
            bench.cleanup()
    return out


def run_pause(bench: Bench, size: int, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"ours_s": [], "ours_running": [], "resume_s": [], "base_s": [],
                                   "base_running": [], "members": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            root = bench.start(wide_tree(size, term_ignoring=False), tmp, size)
            members = bench.tree.scan()
            out["members"].append(len(members))
            started = time.perf_counter()
            bench.tree.pause()
            out["ours_s"].append(time.perf_counter() - started)
            out["ours_running"].append(_not_stopped(bench.tree.scan()))
            started = time.perf_counter()
            bench.tree.resume()
            out["resume_s"].append(time.perf_counter() - started)
            started = time.perf_counter()
            _killpg(root, signal.SIGSTOP)
            out["base_s"].append(time.perf_counter() - started)
            time.sleep(0.05)
            out["base_running"].append(_not_stopped(bench.tree.scan()))
            bench.tree.resume()
            bench.cleanup()
    return out


def _not_stopped(members: list[Member]) -> int:
    """Members not held still (process/frozen.py: stopped by a signal, or in a frozen cgroup)."""
    return sum(1 for member in members if not held(member.pid))


def ms(values: list[float]) -> str:
    value = statistics.median(values) * 1000
    return f"{value:.2f} ms" if value < 10 else f"{value:.0f} ms"


def count(values: list[float]) -> str:
    return f"{max(values):.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small trees, short grace, one run each")
    ap.add_argument("--out", default=str(ROOT / "docs/bench/tree.md"))
    args = ap.parse_args()
    size = 50 if args.quick else 200
    grace = 0.5 if args.quick else 2.0
    runs = 1 if args.quick else 5

    if not set_child_subreaper():
        print("bench_tree: cannot become the child subreaper (prctl failed); orphans would escape", file=sys.stderr)
        return 1
    bench = Bench()
    always = lambda tmp: (lambda: True)  # noqa: E731
    ralph_ready = lambda tmp: (lambda: (tmp / "port").exists() and (tmp / "daemon.pid").exists())  # noqa: E731
    try:
        coop = run_stop(bench, lambda tmp: wide_tree(size, term_ignoring=False), size, grace, runs, always)
        print(f"cooperative: ours {ms(coop['ours_s'])}, naive {ms(coop['base_s'])}", file=sys.stderr)
        deaf = run_stop(bench, lambda tmp: wide_tree(size, term_ignoring=True), size, grace, runs, always)
        print(f"TERM-ignoring: ours {ms(deaf['ours_s'])}, naive {ms(deaf['base_s'])}", file=sys.stderr)
        ralph = run_stop(bench, hard_tree, 6, grace, runs, ralph_ready)
        print(f"ralph-like: ours {ms(ralph['ours_s'])}, naive {ms(ralph['base_s'])}", file=sys.stderr)
        paused = run_pause(bench, size, runs)
        print(f"pause: ours {ms(paused['ours_s'])}, naive {ms(paused['base_s'])}", file=sys.stderr)
    finally:
        bench.cleanup()
        set_child_subreaper(False)

    n = int(statistics.median(coop["members"]))
    rows = [
        f"| stop, cooperative tree ({n} processes), time | {ms(coop['ours_s'])} | {ms(coop['base_s'])} | "
        f"{kit.median_ratio(coop['ours_s'], coop['base_s'])} | < 1 s |",
        f"| stop, cooperative tree, survivors (worst run) | {count(coop['ours_left'])} | {count(coop['base_left'])} | | 0 |",
        f"| stop, TERM-ignoring tree ({int(statistics.median(deaf['members']))} processes), grace {grace:g} s, time | "
        f"{ms(deaf['ours_s'])} | {ms(deaf['base_s'])} | {kit.median_ratio(deaf['ours_s'], deaf['base_s'])} | grace + < 1 s |",
        f"| stop, TERM-ignoring tree, survivors (worst run) | {count(deaf['ours_left'])} | {count(deaf['base_left'])} | | 0 |",
        f"| stop, Ralph-like loop + daemon + listener ({int(statistics.median(ralph['members']))} processes), time | "
        f"{ms(ralph['ours_s'])} | {ms(ralph['base_s'])} | {kit.median_ratio(ralph['ours_s'], ralph['base_s'])} | grace + < 1 s |",
        f"| stop, Ralph-like loop, survivors (worst run) | {count(ralph['ours_left'])} | {count(ralph['base_left'])} | | 0 |",
        f"| pause ({int(statistics.median(paused['members']))} processes), time | {ms(paused['ours_s'])} | "
        f"{ms(paused['base_s'])} | {kit.median_ratio(paused['ours_s'], paused['base_s'])} | < 100 ms |",
        f"| pause, processes still running (worst run) | {count(paused['ours_running'])} | "
        f"{count(paused['base_running'])} | | 0 |",
        f"| resume ({int(statistics.median(paused['members']))} processes), time | {ms(paused['resume_s'])} | | | |",
    ]
    load = os.getloadavg()
    lines = [
        "## tree: stopping and pausing the whole process tree",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, code "
        f"{kit.commit()}; load average at the end {load[0]:.1f} (the machine was shared).",
        f"Mode: {'quick' if args.quick else 'full'}; median of {runs} run(s) on freshly started trees; grace {grace:g} s.",
        "Baseline: `kill -TERM -<pgid>`, wait until the process group is empty or the grace is over, "
        "`kill -KILL -<pgid>` (pause: `kill -STOP -<pgid>`). Its time ends when the group is empty; what it "
        "leaves alive (processes in their own sessions: `setsid` sleeps, the daemon, the listener) is counted "
        "and then killed by us, outside the timing.",
        "",
        "| metric | ours | baseline | ratio | target |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "Ours: TERM to every live descendant (pid + start time checked through a pidfd), wait up to the grace "
        "while reaping and TERMing newcomers, KILL the rest, re-scan until empty. Pause: SIGSTOP parents first, "
        "re-scan until no newcomer, then wait until every member reports state T: the signal path, for a tree in "
        "no cgroup (where the loop has one, the pause is its freeze: section `cgroup`).",
        "",
    ]
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
