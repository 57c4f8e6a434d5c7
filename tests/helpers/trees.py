"""Real process trees shaped like a Ralph loop's, for the process-layer tests and the benchmark.

Choice for tests that need subreaper semantics: the `subreaper` fixture makes the pytest process
itself the child subreaper for the duration of one test (and undoes it after), so orphans of the
test's tree re-parent to pytest, where a ProcessTree rooted at os.getpid() finds them. Its teardown
SIGKILLs whatever is left below pytest and reaps every zombie, then switches the subreaper off again.
Consequence: inside such a test the Reaper owns waitpid; never call Popen.wait() there (use
reaper.adopt(popen) and reaper.exit_code(pid)).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ralph_supervisor.process.cgroup import LoopCgroup
from ralph_supervisor.process.linux import set_child_subreaper
from tests.helpers import wait_for
from ralph_supervisor.process.reaper import Reaper
from ralph_supervisor.process.tree import ProcessTree

HELPERS = Path(__file__).resolve().parent

# A Ralph-like loop: its TERM trap returns instead of exiting, and every turn leaves an orphaned
# `setsid sleep 1000` behind (the subshell exits, the sleep re-parents to the subreaper).
TERM_IGNORING_LOOP = """
trap 'echo "loop: ignoring TERM"' TERM
while :; do
  ( setsid sleep 1000 & )
  sleep 0.2
done
"""

# Classic daemon: fork, setsid, fork again, the middle process exits; the grandchild lives on.
DOUBLE_FORKED_DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1] + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(1000)
    os._exit(0)
os._exit(0)
"""

# A dev server stand-in: listens on a loopback port and writes the port to a file.
PORT_LISTENER = """
import os, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
with open(sys.argv[1] + ".tmp", "w") as fh:
    fh.write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(1000)
"""

BUSY_LOOP = "while :; do :; done"


def hard_tree(workdir: Path) -> list[str]:
    """A TERM-ignoring loop with a double-forked daemon and a setsid'd port listener beside it.

    Ready when `workdir/daemon.pid` and `workdir/port` exist.
    """
    py = sys.executable
    script = (
        f"{py} -c '{DOUBLE_FORKED_DAEMON}' {workdir}/daemon.pid\n"
        f"setsid {py} -c '{PORT_LISTENER}' {workdir}/port &\n"
        f"{TERM_IGNORING_LOOP}"
    )
    return ["bash", "-c", script]


def wide_tree(processes: int, term_ignoring: bool) -> list[str]:
    """At least `processes` processes: a root bash, groups of 20 under sub-shells; in every group some
    sleeps run in their own session and some are orphaned. `term_ignoring` makes every process of
    the tree ignore SIGTERM (trap '' is inherited), so only SIGKILL ends it."""
    groups = max(1, -(-(processes - 1) // 20))
    per_group = max(1, -(-(processes - 1 - groups) // groups))
    ignore = "trap '' TERM\n" if term_ignoring else ""
    script = (
        f"{ignore}group() {{\n"
        f"  for i in $(seq {per_group}); do\n"
        "    case $((i % 3)) in\n"
        "      0) sleep 1000 & ;;\n"
        "      1) setsid sleep 1000 & ;;\n"
        "      2) ( setsid sleep 1000 & ) ;;\n"
        "    esac\n"
        "  done\n"
        "  while :; do sleep 1000; done\n"
        "}\n"
        f"for g in $(seq {groups}); do group & done\n"
        "while :; do sleep 1000; done\n"
    )
    return ["bash", "-c", script]


def wait_for_members(tree: ProcessTree, count: int, timeout: float = 15.0) -> None:
    wait_for(lambda: len(tree.scan()) >= count, timeout, f"{count} tree members")


@pytest.fixture
def subreaper() -> Iterator[Reaper]:
    """Make pytest the child subreaper for one test; kill and reap what the test left below it afterwards
    (processes that were already below pytest before the test are left alone)."""
    assert set_child_subreaper(True)
    reaper = Reaper()
    before = {m.pid for m in ProcessTree(os.getpid(), reaper).scan()}
    try:
        yield reaper
    finally:
        ProcessTree(os.getpid(), reaper, exclude=lambda pid: pid in before).kill_now()
        reaper.reap()
        set_child_subreaper(False)


@pytest.fixture
def loop_cgroup(tmp_path: Path) -> Iterator[LoopCgroup]:
    """A cgroup made as the supervisor makes the loop's (as root here), killed and removed after the test;
    the test is skipped, saying why, where none can be made."""
    state = tmp_path / "cgroup-state"
    state.mkdir()
    cgroup, why = LoopCgroup.create(state)
    if cgroup is None:
        pytest.skip(f"no cgroup can be made here: {why}")
    try:
        yield cgroup
    finally:
        cgroup.remove(state)
