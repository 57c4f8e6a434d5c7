#!/usr/bin/env python3
"""Benchmark the loop's cgroup: stopping a 212-process TERM-ignoring tree by the signal path (ProcessTree.stop,
grace 0) against `cgroup.kill`, pausing it by signals alone and with the cgroup held frozen around them, and the cost of reading the cgroup's figures (what `status`, `watch` and a
metrics scrape read; nothing is read per tick).

Needs a cgroup v2 it can write (root, or a delegated subtree); says so and exits 0 otherwise.
Usage: scripts/bench_cgroup.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ralph_supervisor.process.cgroup import LoopCgroup  # noqa: E402
from ralph_supervisor.process.linux import set_child_subreaper  # noqa: E402
from ralph_supervisor.process.reaper import Reaper  # noqa: E402
from ralph_supervisor.process.spawn import spawn  # noqa: E402
from ralph_supervisor.process.tree import ProcessTree  # noqa: E402
from tests.helpers.trees import wait_for, wide_tree  # noqa: E402

MEMBERS = 212


def start(tree: ProcessTree, reaper: Reaper, cgroup: LoopCgroup) -> None:
    proc = spawn(wide_tree(MEMBERS, term_ignoring=True), Path(tempfile.gettempdir()), enter=cgroup.enter)
    reaper.adopt(proc)
    wait_for(lambda: len(tree.scan()) >= MEMBERS, 30, f"{MEMBERS} members")
    time.sleep(0.05)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="bench-cgroup-"))
    cgroup, why = LoopCgroup.create(state)
    if cgroup is None:
        print(f"no cgroup can be made here: {why}")
        return 0
    set_child_subreaper(True)
    reaper = Reaper()
    tree = ProcessTree(os.getpid(), reaper)
    try:
        for _ in range(args.rounds):
            start(tree, reaper, cgroup)
            began = time.perf_counter()
            result = tree.stop(0.0)
            signals_ms = (time.perf_counter() - began) * 1000
            reaper.reap()
            start(tree, reaper, cgroup)
            inside = len(cgroup.pids())
            began = time.perf_counter()
            cgroup.kill(settle_s=5.0)
            kill_ms = (time.perf_counter() - began) * 1000
            reaper.reap()
            left = len(tree.scan())
            print(f"stop {MEMBERS}: signals {signals_ms:7.1f} ms ({len(result.survivors)} survivors) | "
                  f"cgroup.kill {kill_ms:7.1f} ms ({inside} in it, {left} left)")
        from ralph_supervisor.process.linux import read_stat

        def running() -> int:
            stats = [read_stat(pid) for pid in cgroup.pids()]
            return sum(1 for st in stats if st is not None and st.state not in ("T", "t", "Z"))

        start(tree, reaper, cgroup)
        for label, hold in (("signals", None), ("cgroup-held", cgroup.hold)):
            for _ in range(args.rounds):
                began = time.perf_counter()
                count = tree.pause(hold)
                took_ms = (time.perf_counter() - began) * 1000
                print(f"pause {label:11s}: {took_ms:6.1f} ms, {count} stopped, {running()} running after")
                tree.resume()
                time.sleep(0.1)
        reads = 2000
        cpu0, began = time.process_time(), time.perf_counter()
        for _ in range(reads):
            cgroup.figures()
        cpu = (time.process_time() - cpu0) / reads
        print(f"figures() of {len(cgroup.pids())} processes: {cpu * 1e6:.0f} µs CPU per read "
              f"({(time.perf_counter() - began) / reads * 1e6:.0f} µs wall); at 10 reads a second that is "
              f"{cpu * 10 * 100:.3f} % of a CPU (the supervisor reads it only for status, watch and scrapes)")
        cgroup.kill(settle_s=5.0)
        reaper.reap()
    finally:
        cgroup.remove(state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
