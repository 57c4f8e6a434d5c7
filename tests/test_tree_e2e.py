"""The whole tree, end to end: the real `ralph-supervise run` process owning real, hostile trees.

The process layer has its own unit tests (test_process_*.py); these prove the assembled program:
the CLI's `stop`/`pause`/`resume`, the supervisor's signal handling and its orphan sweep after a
SIGKILL. Survivors are counted by an environment marker read from /proc, so the proof does not rely
on the supervisor's own view of its tree.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers.fault_procs import (
    cli,
    cpu_seconds,
    identities,
    loop_tree,
    marked,
    paused,
    port_bindable,
    running,
    states,
    status,
    still_alive,
    wait_gone,
)
from tests.helpers.trees import hard_tree, wide_tree
from tests.helpers.runs import FAST, Run
from tests.helpers.supervise import events, start, wait_for


# A CPU-busy child (its pid in busy.pid), a setsid'd sleep, an orphaned setsid'd sleep, a plain
# background sleep, and a TERM-ignoring loop that keeps forking short sleeps.
PAUSABLE_TREE = """
trap '' TERM
bash -c 'echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; while :; do :; done' busy "$MARKS/busy.pid" &
setsid sleep 1000 &
( setsid sleep 1000 & )
sleep 1000 &
while :; do sleep 0.2; done
"""


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[Run]:
    run = Run(tmp_path / "work", marks=tmp_path / "marks")
    try:
        yield run
    finally:
        run.cleanup()


@pytest.fixture(params=["cgroup", "signals"])
def pausing(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Run]:
    """A run for the tests about the pause itself, both ways: the cgroup's freeze (where one can be made: as
    root here) and the signals (`--cgroup off`)."""
    run = Run(tmp_path / "work", marks=tmp_path / "marks", options=("--cgroup", "off") if request.param == "signals" else ())
    try:
        yield run
    finally:
        run.cleanup()


def _frozen_by_cgroup(run: Run) -> bool:
    """The pause is the cgroup's freeze (its processes sleep, state S) rather than SIGSTOP (state T)."""
    made = wait_for(lambda: events(run.state_dir, "cgroup_made") + events(run.state_dir, "cgroup_unavailable"),
                    what="the cgroup made, or why not")
    if "--cgroup" in run.options:
        assert made[0]["event"] == "cgroup_unavailable" and made[0]["reason"].startswith("--cgroup off"), made
    return made[0]["event"] == "cgroup_made"


def _hard_tree_ready(run: Run) -> int:
    """Start the TERM-ignoring loop with a daemon and a listener; wait until a few leftovers exist."""
    proc = run.start("--", *hard_tree(run.marks))
    wait_for(lambda: (run.marks / "daemon.pid").exists() and (run.marks / "port").exists(), what="daemon and port")
    daemon = int((run.marks / "daemon.pid").read_text())
    wait_for(lambda: len(running(run.mark, ["sleep", "1000"], frozenset({proc.pid}))) >= 3,
             what="three setsid sleeps left behind by the loop")
    assert psutil.pid_exists(daemon)
    port = int((run.marks / "port").read_text())
    assert not port_bindable(port), "the listener should hold its port"
    return port


def _wide_tree_ready(run: Run) -> None:
    run.start("--", *wide_tree(200, term_ignoring=True))
    wait_for(lambda: len(run.tree()) >= 200, timeout=30, what="200 processes in the tree")


def _stop(run: Run, how: str) -> int:
    """Stop the run as `how` says; return the supervisor's exit code."""
    assert run.proc is not None
    if how == "stop":
        stopped = cli(run.workspace, "stop")
        assert stopped.returncode == 0, stopped.stderr
        # `stop` returns once the tree is gone and the supervisor has exited.
        assert run.proc.poll() is not None or wait_gone(run.proc, 2) is not None
    else:
        run.proc.send_signal(signal.SIGTERM)
    return wait_gone(run.proc, 15)


@pytest.mark.parametrize("how", ["stop", "sigterm"])
def test_a_term_ignoring_loop_with_daemon_listener_and_setsid_leftovers_leaves_nothing(
        supervised: Run, how: str) -> None:
    port = _hard_tree_ready(supervised)
    code = _stop(supervised, how)
    assert code == (0 if how == "stop" else 143)
    assert marked(supervised.mark) == [], "processes of the tree survived"
    assert port_bindable(port), "the listener's port is still taken"
    stopped = events(supervised.state_dir, "tree_stopped")
    assert stopped and all(e["survivors"] == 0 for e in stopped), stopped
    assert stopped[0]["reason"] == ("stop_request" if how == "stop" else "signal")


@pytest.mark.parametrize("how", ["stop", "sigterm"])
def test_a_200_process_term_ignoring_tree_leaves_nothing(supervised: Run, how: str) -> None:
    _wide_tree_ready(supervised)
    code = _stop(supervised, how)
    assert code == (0 if how == "stop" else 143)
    assert marked(supervised.mark) == []
    stopped = events(supervised.state_dir, "tree_stopped")
    assert stopped and all(e["survivors"] == 0 for e in stopped), stopped
    assert stopped[0]["signalled"] >= 200


def test_pause_freezes_every_process_and_resume_thaws_them(pausing: Run) -> None:
    supervised = pausing
    supervised.start("--", "bash", "-c", PAUSABLE_TREE)
    wait_for(lambda: (supervised.marks / "busy.pid").exists(), what="the busy child")
    busy = int((supervised.marks / "busy.pid").read_text())
    wait_for(lambda: len(supervised.tree()) >= 5, what="the tree")

    paused_ = cli(supervised.workspace, "pause")
    assert paused_.returncode == 0, paused_.stderr
    frozen = paused(supervised.tree())
    assert len(frozen) >= 5 and busy in frozen
    assert all(frozen.values()), states(supervised.tree())
    # the freeze holds them sleeping (S), the signals stopped (T): each way is the one asked for
    stopped = {s == psutil.STATUS_STOPPED for s in states(supervised.tree()).values()}
    assert stopped == ({False} if _frozen_by_cgroup(supervised) else {True}), states(supervised.tree())
    before = cpu_seconds(busy)
    time.sleep(0.5)
    assert cpu_seconds(busy) == before, "a paused busy loop accumulated CPU"
    assert all(paused(supervised.tree()).values()), "something thawed by itself"
    live = status(supervised.workspace)
    assert live["child"]["paused"] is True and live["state"] == "OPEN" and live["trigger"] == "manual"
    assert events(supervised.state_dir, "tree_paused")

    resumed = cli(supervised.workspace, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert not any(paused(supervised.tree()).values()), states(supervised.tree())
    before = cpu_seconds(busy)
    wait_for(lambda: cpu_seconds(busy) - before > 0.05, timeout=5, what="the busy loop to run again")
    assert status(supervised.workspace)["child"]["paused"] is False
    assert events(supervised.state_dir, "tree_resumed")

    assert cli(supervised.workspace, "stop").returncode == 0
    assert wait_gone(supervised.proc, 10) == 0
    assert marked(supervised.mark) == []


@pytest.mark.parametrize("how", ["stop", "sigterm"])
def test_stop_of_a_paused_tree_leaves_nothing(pausing: Run, how: str) -> None:
    """Frozen processes do not act on TERM until thawed: a stop must still end them all."""
    supervised = pausing
    supervised.start("--", "bash", "-c", PAUSABLE_TREE)
    wait_for(lambda: (supervised.marks / "busy.pid").exists(), what="the busy child")
    wait_for(lambda: len(supervised.tree()) >= 5, what="the tree")
    assert cli(supervised.workspace, "pause").returncode == 0
    assert _stop(supervised, how) == (0 if how == "stop" else 143)
    assert marked(supervised.mark) == []
    assert all(e["survivors"] == 0 for e in events(supervised.state_dir, "tree_stopped"))


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "(gone)"


def test_after_sigkill_the_child_dies_and_the_next_run_sweeps_the_leftovers_first(supervised: Run) -> None:
    port = _hard_tree_ready(supervised)
    child = supervised.child_pid()
    wait_for(lambda: (supervised.state_dir / "tree.json").exists(), what="the tree record")
    time.sleep(0.6)  # a few more leftovers, some born after the last record

    assert supervised.proc is not None
    supervised.proc.kill()
    supervised.proc.wait(timeout=10)
    wait_for(lambda: child not in {p.pid for p in marked(supervised.mark)}, timeout=5,
             what="the direct child to die with its supervisor (PR_SET_PDEATHSIG)")
    time.sleep(0.3)  # let the loop's short-lived `sleep 0.2` finish: what is left now is left for good
    leftovers = [p for p in marked(supervised.mark) if p.is_running()]
    names = sorted(_name(p) for p in leftovers)
    assert len(leftovers) >= 4, names  # daemon, listener, setsid sleeps
    assert not port_bindable(port)
    old_tree = identities(leftovers)

    # The dead supervisor's socket and lock file are still there: nobody answers.
    assert cli(supervised.workspace, "stop").returncode == 1
    assert status(supervised.workspace)["supervisor"]["running"] is False

    supervised.start("--", "sleep", "1000")
    wait_for(lambda: len(events(supervised.state_dir, "child_started")) >= 2, what="the second child")
    assert not events(supervised.state_dir, "supervisor_stopped"), "the first run died without a word"
    swept = [e for e in events(supervised.state_dir, "orphans_swept") if e["count"] >= 1]
    assert swept, events(supervised.state_dir, "orphans_swept")
    assert swept[-1]["count"] >= len(old_tree)
    order = [e["event"] for e in events(supervised.state_dir) if e["event"] in ("orphans_swept", "child_started")]
    assert order == ["orphans_swept", "child_started", "orphans_swept", "child_started"], order
    assert still_alive(old_tree) == [], "processes of the old tree survived the sweep"
    assert port_bindable(port)

    assert cli(supervised.workspace, "stop").returncode == 0
    assert wait_gone(supervised.proc, 10) == 0
    assert marked(supervised.mark) == []


def test_concurrent_pause_and_resume_requests_end_in_the_state_of_the_last_one(pausing: Run) -> None:
    """Two people (or scripts) pressing pause and resume at once never leave the tree half frozen."""
    import threading

    supervised = pausing
    from ralph_supervisor.control import ControlError, request

    supervised.start("--", "bash", "-c", "trap '' TERM; for i in $(seq 20); do (setsid sleep 1000 &); sleep 1000 & done; "
                                   "while :; do sleep 0.05; done")
    wait_for(lambda: len(supervised.tree()) >= 40, what="the tree")
    failures: list[str] = []

    def send(cmd: str) -> None:
        try:
            request(supervised.state_dir, cmd, timeout=20)
        except ControlError as exc:
            failures.append(f"{cmd}: {exc}")

    for last in ("resume", "pause", "resume"):
        burst = [threading.Thread(target=send, args=("pause" if i % 2 else "resume",)) for i in range(12)]
        for thread in burst:
            thread.start()
        for thread in burst:
            thread.join()
        send(last)
        seen = set(paused(supervised.tree()).values())
        assert seen == {last == "pause"}, states(supervised.tree())
        assert status(supervised.workspace)["child"]["paused"] is (last == "pause")
    assert failures == []
    assert cli(supervised.workspace, "stop").returncode == 0
    assert wait_gone(supervised.proc, 10) == 0
    assert marked(supervised.mark) == []


def test_a_tree_left_frozen_by_a_sigkilled_supervisor_is_swept_by_the_next_run(pausing: Run) -> None:
    """Stopped processes do not act on TERM: the sweep must still end them."""
    supervised = pausing
    supervised.start("--", "bash", "-c", PAUSABLE_TREE)
    wait_for(lambda: (supervised.marks / "busy.pid").exists(), what="the busy child")
    wait_for(lambda: len(supervised.tree()) >= 5, what="the tree")
    assert cli(supervised.workspace, "pause").returncode == 0
    assert supervised.proc is not None
    supervised.proc.kill()
    supervised.proc.wait(timeout=10)
    time.sleep(0.3)
    leftovers = loop_tree(marked(supervised.mark))
    assert len(leftovers) >= 3 and all(paused(leftovers).values()), states(leftovers)
    old_tree = identities(leftovers)

    supervised.start("--", "sleep", "1000")
    # The manual pause is an open breaker: the new run sweeps, then waits for a human (no child yet).
    wait_for(lambda: events(supervised.state_dir, "breaker_still_open"), what="breaker_still_open")
    assert events(supervised.state_dir, "orphans_swept")[-1]["count"] >= len(old_tree)
    assert still_alive(old_tree) == []
    assert len(events(supervised.state_dir, "child_started")) == 1
    assert cli(supervised.workspace, "resume").returncode == 0
    wait_for(lambda: len(events(supervised.state_dir, "child_started")) == 2, what="resume to start the command")
    assert cli(supervised.workspace, "stop").returncode == 0
    assert wait_gone(supervised.proc, 10) == 0
    assert marked(supervised.mark) == []


def test_stop_returns_only_once_the_supervisor_has_released_the_folder(supervised: Run) -> None:
    """A webhook that never answers makes the end of the shutdown slow (the supervisor answers `stop` before
    its notifier gives up): `stop && run` must still find the folder free."""
    import socket

    from ralph_supervisor.files.lock import running_supervisor_pid

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections in the backlog, never answers
    try:
        supervised.start("--notify-webhook", f"http://127.0.0.1:{silent.getsockname()[1]}/hook", "--", "sleep", "1000")
        supervised.child_pid()
        assert cli(supervised.workspace, "pause").returncode == 0  # a breaker transition: a notice to deliver
        stopped = cli(supervised.workspace, "stop")
        assert stopped.returncode == 0, stopped.stderr
        holder = running_supervisor_pid(supervised.state_dir)
        assert wait_gone(supervised.proc, 10) == 0
        assert holder is None, f"`stop` returned while supervisor {holder} still held the folder"
    finally:
        silent.close()


@pytest.mark.parametrize("command", ["pause", "resume", "stop"])
def test_control_commands_with_no_supervisor_exit_1_with_one_line(tmp_path: Path, command: str) -> None:
    never = cli(tmp_path, command)
    assert never.returncode == 1
    assert len(never.stderr.strip().splitlines()) == 1 and str(tmp_path) in never.stderr

    finished = start(tmp_path, *FAST, "--", "true", stdout=subprocess.DEVNULL)
    finished.communicate(timeout=30)
    assert finished.returncode == 0
    after = cli(tmp_path, command)
    assert after.returncode == 1, "a supervisor that exited leaves nobody to ask"
    assert len(after.stderr.strip().splitlines()) == 1


def test_status_and_stop_on_a_folder_that_does_not_exist_are_clear(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    result = subprocess.run([sys.executable, "-m", "ralph_supervisor", "stop", "-w", str(missing)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and str(missing) in result.stderr


@pytest.mark.parametrize("how", ["cgroup", "signals"])
def test_a_pause_waits_for_a_process_in_uninterruptible_sleep_and_says_it_is_not_held_yet(tmp_path: Path,
                                                                                        how: str) -> None:
    """A process in uninterruptible sleep (here: writing to a filesystem frozen by `fsfreeze`) is held by the
    cgroup's freeze, or stops at its SIGSTOP, only when it leaves that sleep: the pause waits its bound for it,
    says so, and the tree is whole held once the write goes through."""
    from tests.helpers.disks import DiskUnavailable, loop_mounted_ext4

    if shutil.which("fsfreeze") is None:
        pytest.skip("fsfreeze is not installed (Debian: util-linux)")
    try:
        disk_context = loop_mounted_ext4(tmp_path / "ext4", size_mib=8)
        disk = disk_context.__enter__()
    except DiskUnavailable as exc:
        pytest.skip(str(exc))
    run = Run(tmp_path / "work", marks=tmp_path / "marks", options=("--cgroup", "off") if how == "signals" else ())
    frozen_fs = False
    try:
        assert subprocess.run(["fsfreeze", "-f", str(disk)], capture_output=True).returncode == 0
        frozen_fs = True
        run.start("--", "bash", "-c", f"sleep 1000 & echo x > {disk}/blocked; sleep 1000")
        assert _frozen_by_cgroup(run) is (how == "cgroup")
        wait_for(lambda: "disk-sleep" in states(run.tree()).values(), what="the writer in uninterruptible sleep")
        started = time.monotonic()
        assert cli(run.workspace, "pause", timeout=30).returncode == 0
        waited = time.monotonic() - started
        slow = events(run.state_dir, "tree_hold_slow")
        assert len(slow) == 1 and slow[0]["how"] == how and slow[0]["waited_s"] == 5.0 and waited >= 4.5, (waited, slow)
        assert False in paused(run.tree()).values(), "the writer is not held while it sleeps in the kernel"
        assert subprocess.run(["fsfreeze", "-u", str(disk)], capture_output=True).returncode == 0
        frozen_fs = False
        wait_for(lambda: set(paused(run.tree()).values()) == {True}, what="every process held once the write went through")
        assert status(run.workspace)["child"]["paused"] is True
        assert cli(run.workspace, "stop").returncode == 0
        assert wait_gone(run.proc, 10) == 0
        assert marked(run.mark) == []
    finally:
        if frozen_fs:  # a process in uninterruptible sleep cannot be killed: thaw the filesystem first
            subprocess.run(["fsfreeze", "-u", str(disk)], capture_output=True)
        run.cleanup()
        disk_context.__exit__(None, None, None)
