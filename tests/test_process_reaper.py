"""The Reaper: the single waitpid owner reaps children and re-parented orphans, with shell exit codes."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.helpers.trees import subreaper, wait_for  # noqa: F401 - subreaper is a fixture
from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.process.linux import all_stats
from ralph_supervisor.process.reaper import Reaper, exit_code_of
from ralph_supervisor.process.spawn import spawn


def _reap_until_known(reaper: Reaper, pid: int) -> int:
    wait_for(lambda: reaper.reap() is not None and reaper.exit_code(pid) is not None, 10, f"pid {pid} reaped")
    code = reaper.exit_code(pid)
    assert code is not None
    return code


def _zombies_of(pid: int) -> list[int]:
    return [s.pid for s in all_stats() if s.ppid == pid and s.state == "Z"]


def test_exit_codes_are_the_shells_0_3_and_128_plus_signal(subreaper: Reaper, tmp_path: Path) -> None:
    zero = spawn(["sh", "-c", "exit 0"], tmp_path)
    three = spawn(["sh", "-c", "exit 3"], tmp_path)
    killed = spawn(["sh", "-c", "kill -9 $$"], tmp_path)
    termed = spawn(["sleep", "30"], tmp_path)
    for proc in (zero, three, killed, termed):
        subreaper.adopt(proc)
    os.kill(termed.pid, signal.SIGTERM)
    assert _reap_until_known(subreaper, zero.pid) == 0
    assert _reap_until_known(subreaper, three.pid) == 3
    assert _reap_until_known(subreaper, killed.pid) == 137
    assert _reap_until_known(subreaper, termed.pid) == 143
    # Adopted Popen objects learn their status from the Reaper (Popen's own -N convention).
    assert (zero.returncode, three.returncode, killed.returncode, termed.returncode) == (0, 3, -9, -15)
    for proc in (zero, three, killed, termed):
        proc.communicate()


def test_orphans_reparented_to_the_subreaper_are_reaped_with_their_exit_codes(
    subreaper: Reaper, tmp_path: Path
) -> None:
    # The subshell exits at once; its child (an orphan now, re-parented to us) exits 7 a moment later.
    script = f"( ( echo $BASHPID > {tmp_path}/orphan.pid; sleep 0.3; exit 7 ) & ); exit 0"
    parent = spawn(["bash", "-c", script], tmp_path)
    subreaper.adopt(parent)
    assert _reap_until_known(subreaper, parent.pid) == 0
    wait_for(lambda: (tmp_path / "orphan.pid").exists() and (tmp_path / "orphan.pid").read_text().strip() != "")
    orphan = int((tmp_path / "orphan.pid").read_text())
    assert _reap_until_known(subreaper, orphan) == 7
    subreaper.reap()
    assert _zombies_of(os.getpid()) == []
    parent.communicate()


def test_memory_of_exit_codes_is_bounded(subreaper: Reaper, tmp_path: Path) -> None:
    reaper = Reaper(memory=3)
    procs = [spawn(["sh", "-c", f"exit {n}"], tmp_path) for n in range(5)]
    for proc in procs:
        reaper.adopt(proc)
    wait_for(lambda: reaper.reap() is not None and all(p.returncode is not None for p in procs), 10, "all reaped")
    remembered = [reaper.exit_code(p.pid) for p in procs]
    assert sum(code is not None for code in remembered) == 3
    assert [p.returncode for p in procs] == [0, 1, 2, 3, 4]
    for proc in procs:
        proc.communicate()


def test_reap_with_no_children_returns_nothing() -> None:
    assert Reaper().reap() == {}


def test_exit_code_of_a_raw_status() -> None:
    proc = subprocess.Popen(["sh", "-c", "kill -15 $$"])
    _, status = os.waitpid(proc.pid, 0)
    proc.returncode = -15
    assert exit_code_of(status) == 143


def test_commands_the_supervisor_runs_itself_keep_their_exit_status(subreaper: Reaper, tmp_path: Path) -> None:
    """subprocess.run() in a thread (git, notify) while the Reaper reaps in a loop: run() gets its real
    code, because a child in our own session is never the tree's and the Reaper leaves it alone."""
    tree_child = spawn(["sh", "-c", "sleep 0.2; exit 4"], tmp_path)
    subreaper.adopt(tree_child)
    results: list[int] = []
    worker = threading.Thread(
        target=lambda: results.extend(subprocess.run(["sh", "-c", f"sleep 0.{n}; exit {n}"]).returncode
                                      for n in range(1, 4))
    )
    worker.start()
    while worker.is_alive():
        subreaper.reap()
        time.sleep(0.002)
    assert results == [1, 2, 3]
    assert _reap_until_known(subreaper, tree_child.pid) == 4
    tree_child.communicate()


def test_a_child_left_alone_is_waited_for_by_its_owner(subreaper: Reaper, tmp_path: Path) -> None:
    hook = subprocess.Popen(["sh", "-c", "exit 6"], start_new_session=True)
    subreaper.leave_alone(hook.pid)
    wait_for(lambda: _zombies_of(os.getpid()) == [hook.pid], 5, "the hook to exit")
    assert subreaper.reap() == {}
    assert hook.wait(5) == 6


def test_a_foreign_zombie_nobody_waits_for_is_reaped_after_the_grace(tmp_path: Path) -> None:
    reaper = Reaper(foreign_grace=0.2)
    lost = subprocess.Popen(["sh", "-c", "exit 2"])  # our session, and nobody will wait for it
    wait_for(lambda: lost.pid in _zombies_of(os.getpid()), 5, "the zombie")
    assert reaper.reap(now=100.0) == {}
    assert reaper.reap(now=100.1) == {}
    assert reaper.reap(now=100.3) == {lost.pid: 2}
    assert _zombies_of(os.getpid()) == []
    lost.returncode = 2  # Popen must not wait for what is gone


def test_a_helpers_exit_first_in_line_stops_a_sigchlds_reap_until_its_owner_has_waited(
        subreaper: Reaper, tmp_path: Path) -> None:
    """A SIGCHLD's reap (`helpers_first`) stops at a helper's zombie (git's: its Popen waits for it at once)
    instead of listing every zombie of ours, and says so; the next reap finds what lay behind it."""
    helper = HELPERS.popen(["sh", "-c", "exit 1"])  # our session: its Popen waits for it, not the Reaper
    wait_for(lambda: helper.pid in _zombies_of(os.getpid()), 5, "the helper to exit")
    tree_child = spawn(["sh", "-c", "exit 5"], tmp_path)  # a later child: behind the helper in waitid's order
    subreaper.adopt(tree_child)
    wait_for(lambda: tree_child.pid in _zombies_of(os.getpid()), 5, "the tree's child to exit")
    try:
        assert subreaper.reap(helpers_first=True) == {}
        assert subreaper.helper_in_the_way
        assert tree_child.pid in _zombies_of(os.getpid())
        assert subreaper.reap() == {tree_child.pid: 5}  # a full reap lists the zombies behind the helper
        assert not subreaper.helper_in_the_way
    finally:
        assert helper.wait(5) == 1
        HELPERS.done(helper.pid)
    assert subreaper.reap(helpers_first=True) == {} and not subreaper.helper_in_the_way
    assert _zombies_of(os.getpid()) == []
