"""spawn(): the supervised command's session, pipes and parent-death signal, on real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.helpers.trees import HELPERS, wait_for
from ralph_supervisor.process.linux import read_stat
from ralph_supervisor.process.spawn import spawn

REPORT_SELF = (
    "import os, sys\n"
    "print(os.getsid(0), os.getpgrp(), os.readlink('/proc/self/fd/0'), os.getcwd(), os.environ.get('PROBE'))\n"
    "print('to stderr', file=sys.stderr)\n"
)


def test_child_leads_its_own_session_reads_dev_null_and_writes_two_separate_pipes(tmp_path: Path) -> None:
    proc = spawn([sys.executable, "-c", REPORT_SELF], tmp_path, env={**os.environ, "PROBE": "here"})
    out, err = proc.communicate(timeout=10)
    sid, pgid, stdin, cwd, probe = out.decode().split()
    assert int(sid) == proc.pid and int(pgid) == proc.pid
    assert stdin == "/dev/null"
    assert cwd == str(tmp_path)
    assert probe == "here"
    assert err == b"to stderr\n"
    assert proc.returncode == 0


def test_a_missing_command_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        spawn([str(tmp_path / "no-such-command")], tmp_path)


def test_a_command_that_is_not_executable_raises_permission_error(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(PermissionError):
        spawn([str(script)], tmp_path)


def test_an_empty_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty command"):
        spawn([], tmp_path)


def test_the_child_dies_with_its_supervisor(tmp_path: Path) -> None:
    """SIGKILL to a (fake) supervisor: the kernel kills its direct child through PR_SET_PDEATHSIG."""
    supervisor = subprocess.Popen(
        [sys.executable, str(HELPERS / "fake_supervisor.py"), str(tmp_path / "tree.json"),
         "RALPH_SUPERVISE_TREE=spawn-test", "--", "sleep", "1000"],
        stdout=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        assert supervisor.stdout is not None
        line = json.loads(supervisor.stdout.readline())
        child = line["child"]
        child_stat = read_stat(child)
        assert child_stat is not None and child_stat.alive and child_stat.ppid == supervisor.pid
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(5)

        def child_gone() -> bool:
            stat = read_stat(child)
            return stat is None or stat.start_ticks != child_stat.start_ticks or not stat.alive

        wait_for(child_gone, 5, "the direct child to die with its supervisor")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()


def test_the_loop_reads_a_piped_standard_input_but_never_a_terminal(tmp_path: Path) -> None:
    """`printf '2' | ralph-supervise -- loop` answers the loop's own prompt; a terminal stays the supervisor's."""
    import pty

    script = "from ralph_supervisor.process.spawn import loop_stdin; import subprocess; print(loop_stdin() == subprocess.DEVNULL)"
    piped = subprocess.run([sys.executable, "-c", script], input=b"2", capture_output=True, cwd=REPO)
    assert piped.stdout.strip() == b"False"
    closed = subprocess.run([sys.executable, "-c", script], stdin=subprocess.DEVNULL, capture_output=True, cwd=REPO)
    assert closed.stdout.strip() == b"False", "/dev/null is a file: passed on as it is"
    leader, follower = pty.openpty()
    try:
        tty = subprocess.run([sys.executable, "-c", script], stdin=follower, capture_output=True, cwd=REPO)
    finally:
        os.close(leader)
        os.close(follower)
    assert tty.stdout.strip() == b"True"
