"""The pause as the cgroup's freeze, on this machine's real cgroups (as root; skipped, saying why, where none can
be made): what "held" means on either path (process/frozen.py), SIGCONT from outside, processes that left
the cgroup, a folder that disappears or becomes read-only mid-run, and a kill of a frozen tree.

Every test runs with pytest as the child subreaper (the `subreaper` fixture, see helpers/trees.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.helpers.trees import BUSY_LOOP, loop_cgroup, subreaper, wait_for, wait_for_members  # noqa: F401 - fixtures
from ralph_supervisor.process.cgroup import LoopCgroup, events_frozen, wait_frozen
from ralph_supervisor.process.frozen import cgroup_of, held
from ralph_supervisor.process.linux import read_stat
from ralph_supervisor.process.reaper import Reaper
from ralph_supervisor.process.spawn import spawn
from ralph_supervisor.process.tree import ProcessTree

_pipes: list = []


@pytest.fixture
def cgroup(loop_cgroup: LoopCgroup) -> Iterator[LoopCgroup]:
    yield loop_cgroup
    while _pipes:
        pipe = _pipes.pop()
        if pipe is not None:
            pipe.close()


def start(reaper: Reaper, script: str, cwd: Path, cgroup: LoopCgroup | None) -> int:
    proc = spawn(["bash", "-c", script], cwd, enter=cgroup.enter if cgroup is not None else None)
    reaper.adopt(proc)
    _pipes.extend([proc.stdout, proc.stderr])
    return proc.pid


def cpu_ticks(pid: int) -> int:
    stat = read_stat(pid)
    return stat.cpu_ticks if stat is not None else -1


def busy(tmp_path: Path, name: str = "busy") -> str:
    """A shell line that starts a busy loop and writes its pid to `name`."""
    return f"bash -c 'echo $$ > {tmp_path / name}.tmp; mv {tmp_path / name}.tmp {tmp_path / name}; {BUSY_LOOP}' & "


def pid_in(path: Path) -> int:
    wait_for(lambda: path.exists(), 10, path.name)
    return int(path.read_text())


def move_out(cgroup: LoopCgroup, pid: int) -> None:
    """What `systemd-run --scope` or a container engine does to a process of the loop: into another cgroup."""
    (cgroup.path.parent / "cgroup.procs").write_text(str(pid))


@pytest.fixture
def read_only() -> Iterator[list[Path]]:
    """Folders made read-only by a bind mount over themselves (`mount -o remount,bind,ro`); unmounted after."""
    mounted: list[Path] = []
    yield mounted
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=False)


def make_read_only(folder: Path, mounted: list[Path]) -> None:
    try:
        subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot bind-mount {folder} read-only here: {exc}")
    mounted.append(folder)
    subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True, capture_output=True)


# ---------------------------------------------------------------------------------------- the one helper


def test_held_is_a_signal_stop_or_a_frozen_cgroup_and_never_a_process_that_is_gone(
        subreaper: Reaper, cgroup: LoopCgroup, tmp_path: Path) -> None:
    assert held(os.getpid()) is False
    assert cgroup_of(os.getpid()) is not None and events_frozen(cgroup.path) is False
    stopped = start(subreaper, "sleep 1000", tmp_path, None)
    frozen = start(subreaper, "sleep 1000", tmp_path, cgroup)
    wait_for(lambda: frozen in cgroup.members(), 10, "the sleep in the cgroup")
    os.kill(stopped, signal.SIGSTOP)
    wait_for(lambda: held(stopped), 10, "the SIGSTOP")
    assert cgroup.freeze() is None
    assert read_stat(frozen).state == "S" and held(frozen)  # the state cannot tell; its cgroup's events do
    assert cgroup_of(frozen) == cgroup.path
    assert held(frozen, "S", frozen=frozenset({frozen}))
    assert cgroup.thaw() is None and not held(frozen) and not cgroup.frozen()
    for pid in (stopped, frozen):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: subreaper.reap() or (subreaper.exit_code(stopped) is not None), 10, "the reap")
    assert held(stopped) is False and held(999_999_999) is False


def test_waiting_for_a_cgroup_that_is_gone_returns_at_once(tmp_path: Path) -> None:
    began = time.monotonic()
    assert wait_frozen(tmp_path / "nothing", True, 5.0) is False
    assert events_frozen(tmp_path / "nothing") is None
    assert time.monotonic() - began < 1.0


# ---------------------------------------------------------------------------------------- the freeze


def test_sigcont_from_outside_does_not_thaw_a_frozen_tree(subreaper: Reaper, cgroup: LoopCgroup, tmp_path: Path) -> None:
    tree = ProcessTree(os.getpid(), subreaper, freezer=cgroup)
    start(subreaper, busy(tmp_path) + "sleep 1000 & wait", tmp_path, cgroup)
    loop = pid_in(tmp_path / "busy")
    wait_for_members(tree, 3)
    assert tree.pause() >= 3 and cgroup.frozen()
    for member in tree.scan():
        os.kill(member.pid, signal.SIGCONT)
    before = cpu_ticks(loop)
    time.sleep(0.3)
    assert cpu_ticks(loop) == before and tree.held(tree.sample())
    assert tree.resume() >= 3
    wait_for(lambda: cpu_ticks(loop) > before, 5, "the busy loop to run again")
    assert tree.stop(0.5).survivors == ()


def test_a_process_that_left_the_cgroup_is_paused_by_signal_before_and_during_the_pause(
        subreaper: Reaper, cgroup: LoopCgroup, tmp_path: Path) -> None:
    """The freeze holds what is in the cgroup; a member of the tree outside it (moved out, as `systemd-run
    --scope` or a container engine does) is stopped by a signal: at the pause when a look saw it, at the next
    look when it left later."""
    tree = ProcessTree(os.getpid(), subreaper, freezer=cgroup)
    start(subreaper, busy(tmp_path, "early") + busy(tmp_path, "late") + busy(tmp_path, "inside") + "wait", tmp_path,
          cgroup)
    early, late, inside = (pid_in(tmp_path / name) for name in ("early", "late", "inside"))
    wait_for_members(tree, 4)
    move_out(cgroup, early)
    tree.sample()  # the tick's look: `early` is outside

    tree.pause()

    assert read_stat(early).state == "T" and read_stat(inside).state != "T" and held(inside)
    move_out(cgroup, late)  # leaving a frozen cgroup thaws it...
    wait_for(lambda: cpu_ticks(late) > 0 and not held(late), 5, "the escaped loop to run")
    tree.sample()  # ...until the next look stops it (it sends the SIGSTOP and waits for nothing)
    wait_for(lambda: held(late), 5, "the escaped loop stopped")
    assert read_stat(late).state == "T" and tree.held(tree.sample())

    tree.resume()

    assert not any(held(pid) for pid in (early, late, inside))
    assert tree.stop(0.5).survivors == ()


def test_a_loop_that_never_entered_the_cgroup_is_paused_by_signal(subreaper: Reaper, cgroup: LoopCgroup,
                                                                   tmp_path: Path) -> None:
    tree = ProcessTree(os.getpid(), subreaper, freezer=cgroup)
    start(subreaper, busy(tmp_path) + "wait", tmp_path, None)  # its enter failed, say
    loop = pid_in(tmp_path / "busy")
    wait_for_members(tree, 2)
    assert tree.pause() == 2  # the supervisor's own children are looked at, not only what a look saw
    assert read_stat(loop).state == "T" and tree.held(tree.sample())
    assert tree.resume() == 2 and not held(loop)
    assert tree.stop(0.5).survivors == ()


def test_kill_now_of_a_frozen_tree_leaves_nothing_and_the_cgroup_thawed(subreaper: Reaper, cgroup: LoopCgroup,
                                                                        tmp_path: Path) -> None:
    tree = ProcessTree(os.getpid(), subreaper, freezer=cgroup)
    start(subreaper, "trap '' TERM; for i in $(seq 20); do sleep 1000 & done; wait", tmp_path, cgroup)
    wait_for_members(tree, 21)
    tree.pause()
    assert cgroup.frozen()
    assert tree.kill_now().survivors == ()
    assert tree.scan() == [] and not cgroup.frozen() and cgroup.members() == frozenset()


# ---------------------------------------------------------------------------------------- bad folders


def test_a_cgroup_folder_gone_mid_run_is_said_once_and_the_signals_pause_the_tree(
        subreaper: Reaper, cgroup: LoopCgroup, tmp_path: Path) -> None:
    tree = ProcessTree(os.getpid(), subreaper, freezer=cgroup)
    start(subreaper, busy(tmp_path) + "wait", tmp_path, cgroup)
    loop = pid_in(tmp_path / "busy")
    wait_for_members(tree, 2)
    for pid in cgroup.members():
        move_out(cgroup, pid)
    cgroup.path.rmdir()  # someone removed it (it must be empty for that)
    with capture_logs() as logs:
        tree.sample()
        tree.sample()
        assert tree.pause() == 2

    assert [e["event"] for e in logs] == ["cgroup_lost"] and "is gone" in logs[0]["error"]
    assert not tree.freezes and cgroup.latest is None
    assert read_stat(loop).state == "T"
    assert tree.resume() == 2 and not held(loop)
    assert tree.stop(0.5).survivors == ()


def test_a_cgroup_folder_read_only_before_a_pause_is_said_once_and_the_signals_pause_the_tree(
        subreaper: Reaper, cgroup: LoopCgroup, tmp_path: Path, read_only: list[Path]) -> None:
    tree = ProcessTree(os.getpid(), subreaper, freezer=cgroup)
    start(subreaper, busy(tmp_path) + "wait", tmp_path, cgroup)
    loop = pid_in(tmp_path / "busy")
    wait_for_members(tree, 2)
    make_read_only(cgroup.path, read_only)
    with capture_logs() as logs:
        assert tree.pause() == 2
        tree.resume()
        tree.pause()
    assert [e["event"] for e in logs] == ["cgroup_lost"] and "Read-only file system" in logs[0]["error"]
    assert read_stat(loop).state == "T" and not cgroup.frozen()
    assert tree.resume() == 2 and not held(loop)
    assert tree.stop(0.5).survivors == ()


def test_a_cgroup_folder_that_turns_read_only_while_frozen_is_thawed_by_moving_its_processes_out(
        subreaper: Reaper, cgroup: LoopCgroup, tmp_path: Path, read_only: list[Path]) -> None:
    tree = ProcessTree(os.getpid(), subreaper, freezer=cgroup)
    start(subreaper, busy(tmp_path) + "wait", tmp_path, cgroup)
    loop = pid_in(tmp_path / "busy")
    wait_for_members(tree, 2)
    tree.pause()
    before = cpu_ticks(loop)
    make_read_only(cgroup.path, read_only)
    with capture_logs() as logs:
        tree.resume()

    assert [e["event"] for e in logs] == ["cgroup_lost"], logs
    assert "moved out" in logs[0]["error"] and "Read-only file system" in logs[0]["error"]
    wait_for(lambda: cpu_ticks(loop) > before, 5, "the loop to run again")
    assert cgroup_of(loop) == cgroup.path.parent and not held(loop)
    assert tree.pause() == 2 and read_stat(loop).state == "T"  # by signals from now on
    assert tree.resume() == 2
    assert tree.stop(0.5).survivors == ()


def test_a_cgroup_the_loop_made_inside_ours_is_frozen_with_it_and_removed_with_it(
        subreaper: Reaper, tmp_path: Path) -> None:
    state = tmp_path / "own"
    state.mkdir()
    cgroup, why = LoopCgroup.create(state)
    if cgroup is None:
        pytest.skip(f"no cgroup can be made here: {why}")
    tree = ProcessTree(os.getpid(), subreaper, freezer=cgroup)
    inner = cgroup.path / "inner" / "deeper"
    start(subreaper, f"mkdir -p {inner}; {busy(tmp_path)} wait", tmp_path, cgroup)
    loop = pid_in(tmp_path / "busy")
    (inner / "cgroup.procs").write_text(str(loop))  # a loop that manages cgroups of its own, below ours
    wait_for_members(tree, 2)
    assert loop in cgroup.members() and loop not in cgroup.pids()
    assert tree.pause() == 2 and cgroup.frozen()  # the cgroups below it too, when it returns
    assert held(loop) and read_stat(loop).state != "T", (cgroup_of(loop), read_stat(loop))
    assert tree.resume() == 2 and not held(loop)
    assert cgroup.remove(state) and not cgroup.path.exists()  # the loop's own cgroups first
    subreaper.reap()
    assert tree.scan() == []
