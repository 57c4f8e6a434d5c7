"""`HELPERS.run`: the lean way the supervisor runs a short command of its own (git, five times a snapshot).

Real processes: exit codes, the input given and the output read whole (more than a pipe holds), a bound on
the time that kills and waits, the pid a helper's while it runs (so the tree never takes it for its own), and
nothing of ours inherited but the three standard streams, even with the workspace's inotify watcher open."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from ralph_supervisor.evidence.inotify_source import InotifySource
from ralph_supervisor.evidence.scope import Scope
from ralph_supervisor.process.helpers import HELPERS, TimedOut
from tests.helpers import wait_for
from tests.test_inotify_source import Heard

SH = shutil.which("sh") or "/bin/sh"


def _zombies() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rpartition(")")[2].split()
            if fields[0] == "Z" and int(fields[1]) == os.getpid():
                found.append(int(entry))
    return found


def test_a_command_gets_its_input_and_gives_back_its_exit_code_output_and_errors() -> None:
    big = b"line\n" * 40_000  # 200 KB: more than a pipe holds, both ways
    done = HELPERS.run([SH, "-c", "cat; echo oops >&2; exit 3"], env={}, input=big)
    assert (done.code, done.out, done.err) == (3, big, b"oops\n")
    assert HELPERS.run(["sh", "-c", "kill -9 $$"], env={"PATH": os.environ["PATH"]}).code == -9  # looked up
    assert HELPERS.run([SH, "-c", "cat"], env={}).out == b""  # no input: an empty stdin, never ours
    assert HELPERS.run([SH, "-c", 'printf %s "$ONLY"'], env={"ONLY": "this"}).out == b"this"
    with pytest.raises(FileNotFoundError):
        HELPERS.run(["/nonexistent/git", "--version"], env={})
    assert _zombies() == []


def test_a_command_over_its_time_is_killed_and_waited_for() -> None:
    began = time.monotonic()
    with pytest.raises(TimedOut):
        HELPERS.run([SH, "-c", "sleep 30"], env={}, timeout=0.3)
    assert time.monotonic() - began < 10
    assert _zombies() == [] and HELPERS.pids() == frozenset()


def test_a_running_command_is_a_helper_until_it_has_been_waited_for(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    seen: list[frozenset[int]] = []
    worker = threading.Thread(target=lambda: HELPERS.run([SH, "-c", f"echo $$ > {tmp_path}/pid; "
                                                               f"while [ ! -e {gate} ]; do sleep 0.01; done"], env={}))
    worker.start()
    try:
        wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text().strip() != "", 10, "start")
        seen.append(HELPERS.pids())
    finally:
        gate.touch()
        worker.join(10)
    assert seen == [frozenset({int((tmp_path / "pid").read_text())})]
    assert HELPERS.pids() == frozenset()


def test_a_command_inherits_only_the_standard_streams_even_with_the_watcher_open(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    scope = Scope(root)
    scope.load(tmp_path / "state", ())
    watcher = InotifySource(scope, Heard().hooks())
    watcher.start()
    try:
        inotify = {int(fd) for fd in os.listdir("/proc/self/fd")
                   if _target(fd) == "anon_inode:inotify"}
        assert inotify
        listing = {int(fd) for fd in HELPERS.run([SH, "-c", "ls /proc/$$/fd"], env={}).out.split()}
        inheritable = {int(fd) for fd in os.listdir("/proc/self/fd") if _inheritable(int(fd))}
    finally:
        watcher.close()
    assert not listing & inotify
    assert listing - {0, 1, 2, 3} <= inheritable  # 3: the folder ls reads; the rest came to this test so


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _inheritable(fd: int) -> bool:
    try:
        return os.get_inheritable(fd)
    except OSError:
        return False
