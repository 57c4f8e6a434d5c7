#!/usr/bin/env python3
"""Benchmark the loop's cgroup against the signal path, side by side on the same 212-process tree:

  - pause: `ProcessTree.pause` with the cgroup (its freeze, `cgroup.freeze`) and without (SIGSTOP to every
    member, re-scanning until no newcomer); how many members are not held when it returns (process/frozen.py,
    the same helper `status` uses), and the resume;
  - stop of a TERM-ignoring tree, grace 0, and of the same tree paused first: the signals alone
    (`ProcessTree.stop`) against the supervisor's cgroup sequence (the stop, then `cgroup.kill`), and
    `cgroup.kill` alone; survivors counted by a full scan and in the cgroup;
  - the tick's look at the cgroup (`ProcessTree.sample` with a cgroup: CPU and memory each tick, who is in it at
    most once a second), in µs of CPU, and what that is of one CPU at each tick rate (tick_rate.py), for the
    212-process tree and a loop-sized one of 12; beside it, the sample the tick takes anyway and the figures
    `status` read before.

Needs a cgroup v2 it can write (root, or a delegated subtree): says so, writes that in the section, exits 0.
Usage: scripts/bench_cgroup.py [--quick] [--out docs/bench/cgroup.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import _benchkit as kit  # noqa: E402 - the machine line and the commit

from ralph_supervisor.process.cgroup import LoopCgroup  # noqa: E402
from ralph_supervisor.process.frozen import held  # noqa: E402
from ralph_supervisor.process.linux import descendant_stats, set_child_subreaper  # noqa: E402
from ralph_supervisor.process.reaper import Reaper  # noqa: E402
from ralph_supervisor.process.spawn import spawn  # noqa: E402
from ralph_supervisor.process.tree import ProcessTree  # noqa: E402
from ralph_supervisor.tick_rate import TICK_ACTIVE, TICK_IDLE, TICK_OUTPUT, TICK_QUIET  # noqa: E402
from tests.helpers.trees import wait_for, wide_tree  # noqa: E402

MEMBERS = 212
SMALL = 12
CPU_TARGET = 0.05
"""Percent of one CPU the tick's look at the cgroup may cost."""


class Bench:
    def __init__(self, cgroup: LoopCgroup) -> None:
        self.cgroup = cgroup
        self.reaper = Reaper()
        self.signals = ProcessTree(os.getpid(), self.reaper)
        self.frozen = ProcessTree(os.getpid(), self.reaper, freezer=cgroup)
        self.pipes: list = []

    def start(self, members: int, term_ignoring: bool = True) -> None:
        proc = spawn(wide_tree(members, term_ignoring=term_ignoring), Path(tempfile.gettempdir()),
                     enter=self.cgroup.enter)
        self.reaper.adopt(proc)
        self.pipes += [proc.stdout, proc.stderr]
        wait_for(lambda: len(self.signals.scan()) >= members, 60, f"{members} members")
        time.sleep(0.05)

    def left(self) -> int:
        self.reaper.reap()
        return len(self.signals.scan()) + len(self.cgroup.members())

    def running(self) -> int:
        """Members not held still (process/frozen.py), right now."""
        return sum(1 for member in self.signals.scan() if not held(member.pid))

    def clean(self) -> None:
        self.signals.kill_now()
        self.cgroup.kill(settle_s=5.0)
        self.reaper.reap()
        for pipe in self.pipes:
            if pipe is not None:
                pipe.close()
        self.pipes.clear()


def pauses(bench: Bench, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in ("cgroup", "signals", "cgroup_running", "signals_running",
                                                   "cgroup_resume", "signals_resume", "members")}
    bench.start(MEMBERS, term_ignoring=False)
    try:
        for _ in range(rounds):
            for way, tree in (("cgroup", bench.frozen), ("signals", bench.signals)):
                tree.sample()  # as the tick does before any pause
                began = time.perf_counter()
                count = tree.pause()
                out[way].append(time.perf_counter() - began)
                out[f"{way}_running"].append(bench.running())
                out["members"].append(count)
                began = time.perf_counter()
                tree.resume()
                out[f"{way}_resume"].append(time.perf_counter() - began)
                time.sleep(0.1)
    finally:
        bench.clean()
    return out


def stops(bench: Bench, rounds: int) -> dict[str, list[float]]:
    ways: dict[str, Callable[[], None]] = {
        "signals": lambda: bench.signals.stop(0.0),
        "cgroup": lambda: (bench.frozen.stop(0.0), bench.cgroup.kill(settle_s=5.0)),
        "kill": lambda: bench.cgroup.kill(settle_s=5.0),
        "paused signals": lambda: (bench.signals.pause(), bench.signals.stop(0.0)),
        "paused cgroup": lambda: (bench.frozen.pause(), bench.frozen.stop(0.0), bench.cgroup.kill(settle_s=5.0)),
    }
    out: dict[str, list[float]] = {}
    for _ in range(rounds):
        for way, stop in ways.items():
            bench.start(MEMBERS)
            began = time.perf_counter()
            stop()
            out.setdefault(way, []).append(time.perf_counter() - began)
            out.setdefault(f"{way} left", []).append(bench.left())
            bench.clean()
    return out


def cpu_us(call: Callable[[], object], reads: int) -> float:
    """µs of this process's CPU per call: the median of five batches."""
    batches = []
    for _ in range(5):
        began = time.process_time()
        for _ in range(reads):
            call()
        batches.append((time.process_time() - began) / reads * 1e6)
    return statistics.median(batches)


def looks(bench: Bench, members: int, reads: int) -> dict[str, float]:
    bench.start(members, term_ignoring=False)
    try:
        inside = bench.cgroup.members()
        return {
            "members": len(inside),
            "look": cpu_us(lambda: bench.cgroup.look(inside), reads),
            "who": cpu_us(bench.cgroup.members, reads),
            "figures": cpu_us(bench.cgroup.figures, reads),
            "sample": cpu_us(lambda: descendant_stats(os.getpid()), max(10, reads // 20)),
        }
    finally:
        bench.clean()


def per_second(look_us: float, who_us: float, rate: float) -> float:
    """Percent of one CPU: a look per tick, who is inside at most once a second."""
    return (look_us * rate + who_us * min(rate, 1.0)) / 1e6 * 100


def ms(values: list[float]) -> str:
    value = statistics.median(values) * 1000
    return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"


def spread(values: list[float]) -> str:
    return f"{min(values) * 1000:.1f}-{max(values) * 1000:.1f} ms"


def verdict(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def section(lines: list[str], out: Path) -> None:
    """Write the section, with its notes kept by hand (`cgroup.notes.md`) after it."""
    notes = out.with_name("cgroup.notes.md")
    text = "\n".join(lines) + "\n" + ("\n" + notes.read_text(encoding="utf-8") if notes.exists() else "")
    out.write_text(text, encoding="utf-8")
    print(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "cgroup.md")
    args = parser.parse_args(argv)
    rounds, stop_rounds, reads = (3, 1, 200) if args.quick else (9, 3, 2000)
    load_before = kit.loadavg()
    head = ["## cgroup: pause and stop through the loop's cgroup against the signals, and the tick's look at it", ""]
    state = Path(tempfile.mkdtemp(prefix="bench-cgroup-"))
    cgroup, why = LoopCgroup.create(state)
    if cgroup is None:
        section(head + [f"Not measured on {kit.machine_line()}: no cgroup can be made here ({why})."], args.out)
        return 0
    if not set_child_subreaper(True):
        print("bench_cgroup: cannot become the child subreaper", file=sys.stderr)
        return 1
    bench = Bench(cgroup)
    try:
        paused = pauses(bench, rounds)
        print(f"pause: cgroup {ms(paused['cgroup'])}, signals {ms(paused['signals'])}", file=sys.stderr)
        stopped = stops(bench, stop_rounds)
        print(f"stop: cgroup {ms(stopped['cgroup'])}, signals {ms(stopped['signals'])}", file=sys.stderr)
        big, small = looks(bench, MEMBERS, reads), looks(bench, SMALL, reads)
    finally:
        bench.clean()
        cgroup.remove(state)
        set_child_subreaper(False)
    load_after = kit.loadavg()

    n = int(statistics.median(paused["members"]))
    worst = max(per_second(big["look"], big["who"], 1 / TICK_ACTIVE), per_second(small["look"], small["who"], 1 / TICK_ACTIVE))
    rows = [
        f"| pause, the {MEMBERS}-process tree ({n} processes), time | {ms(paused['cgroup'])} | {ms(paused['signals'])} | "
        f"{kit.median_ratio(paused['cgroup'], paused['signals'])} | < 10 ms | {verdict(statistics.median(paused['cgroup']) < 0.010)} |",
        f"| pause, processes not held when it returns (worst run) | {max(paused['cgroup_running']):.0f} | "
        f"{max(paused['signals_running']):.0f} | | 0 | {verdict(max(paused['cgroup_running']) == 0)} |",
        f"| resume, the same, time | {ms(paused['cgroup_resume'])} | {ms(paused['signals_resume'])} | "
        f"{kit.median_ratio(paused['cgroup_resume'], paused['signals_resume'])} | | |",
        f"| stop, the {MEMBERS}-process tree ignoring TERM, grace 0: the stop then cgroup.kill / the signals alone | "
        f"{ms(stopped['cgroup'])} | {ms(stopped['signals'])} | {kit.median_ratio(stopped['cgroup'], stopped['signals'])} | | |",
        f"| stop, survivors (worst run) | {max(stopped['cgroup left']):.0f} | {max(stopped['signals left']):.0f} | | 0 | "
        f"{verdict(max(stopped['cgroup left']) == 0)} |",
        f"| stop of the paused tree, grace 0 (pause included) | {ms(stopped['paused cgroup'])} | "
        f"{ms(stopped['paused signals'])} | {kit.median_ratio(stopped['paused cgroup'], stopped['paused signals'])} | | |",
        f"| stop of the paused tree, survivors (worst run) | {max(stopped['paused cgroup left']):.0f} | "
        f"{max(stopped['paused signals left']):.0f} | | 0 | {verdict(max(stopped['paused cgroup left']) == 0)} |",
        f"| cgroup.kill alone, the same tree: time, survivors | {ms(stopped['kill'])}, {max(stopped['kill left']):.0f} left | | | | |",
        f"| the tick's look at the cgroup, at the fastest tick ({1 / TICK_ACTIVE:.0f} a second), worst tree | "
        f"{worst:.3f} % of a CPU | | | < {CPU_TARGET} % | {verdict(worst < CPU_TARGET)} |",
    ]
    rates = [("a call starting", TICK_ACTIVE), ("a call printing", TICK_OUTPUT), ("idle", TICK_IDLE), ("quiet", TICK_QUIET)]
    tick_rows = []
    for label, size in (("212 processes", big), ("12 processes", small)):
        cost = ", ".join(f"{per_second(size['look'], size['who'], 1 / every):.3f} %" for _, every in rates)
        tick_rows.append(f"| {label} ({size['members']:.0f} in the cgroup) | {size['look']:.1f} µs | {size['who']:.1f} µs "
                         f"| {cost} | {size['figures']:.0f} µs | {size['sample']:.0f} µs |")
    lines = head + [
        f"Machine: {kit.machine_line()}; load average {load_before:.1f} at the start, {load_after:.1f} at the end "
        "(the machine was shared: both ways ran in the same minutes, alternating).",
        f"Mode: {'quick' if args.quick else 'full'}; pause: median of {rounds} rounds each way on one {MEMBERS}-process "
        f"tree (spread: cgroup {spread(paused['cgroup'])}, signals {spread(paused['signals'])}); stops: median of "
        f"{stop_rounds} fresh TERM-ignoring trees each way; CPU costs: median of five batches of {reads} reads.",
        "Ours: the cgroup path (`ProcessTree` with the loop's cgroup: pause is `cgroup.freeze` until `cgroup.events` "
        "says `frozen 1`, plus a look for members outside it); baseline: the signal path (SIGSTOP to every member, "
        "re-scanning until no newcomer; the stop TERMs and KILLs each). \"Not held\" is judged by "
        "`process/frozen.py`, the helper `status` uses: state T, or a frozen cgroup.",
        "",
        "| metric | ours | baseline | ratio | target | met? |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "The tick's look, in µs of the supervisor's CPU: CPU and memory at every tick (`look`), who is in the cgroup "
        "at most once a second (`who`, `cgroup.procs`: it grows with the tree), as a share of one CPU at the tick "
        "rates of tick_rate.py (a call starting, printing, idle, quiet). Beside it, for scale: the figures `status` "
        "read before (pathlib, every file) and the tree sample every tick takes anyway (children files).",
        "",
        "| tree | look | who | % of a CPU at 10 / 4 / 2 / 1 ticks a second | status's old read | the tick's sample |",
        "|---|---|---|---|---|---|",
        *tick_rows,
        "",
    ]
    section(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
