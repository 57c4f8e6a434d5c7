"""Start the supervised command so that it cannot outlive us unnoticed.

The child becomes a session leader (its own session and process group, away from our terminal's
SIGINT/SIGHUP), reads /dev/null, writes stdout and stderr to two separate pipes, and carries
PR_SET_PDEATHSIG=SIGKILL so the kernel kills it if the supervisor dies.

Why a preexec_fn although the supervisor has threads: subprocess has no option for the parent-death
signal. Our preexec_fn calls one prepared ctypes function (prctl) and getppid(); it takes no locks of
ours and imports nothing, which is the narrow use the subprocess docs tolerate. setsid is done by
subprocess itself (start_new_session), in C.

Caveat for callers: the parent-death signal fires when the parent THREAD exits, not the process. Call
spawn() from a thread that lives as long as the child (the supervisor's main thread), never from
asyncio.to_thread or a pool worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from ralph_supervisor.process.linux import set_parent_death_signal

log = structlog.get_logger(__name__)

ORPHANED_EXIT = 125
"""Exit status of a child whose supervisor died before the parent-death signal was armed."""


def loop_stdin() -> int:
    """What the loop reads: our standard input when it is a pipe or a file (`printf '2' | ralph-supervise …`
    answers the loop's own prompt), else nothing (a terminal stays ours: the loop runs in a session of its
    own, with no terminal to read)."""
    try:
        os.fstat(0)
    except OSError:
        return subprocess.DEVNULL
    return subprocess.DEVNULL if os.isatty(0) else 0


def spawn(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
          stdin: int = subprocess.DEVNULL, enter: Callable[[], None] | None = None,
          stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE) -> subprocess.Popen[bytes]:
    """Start argv in cwd as a new session leader, stdout and stderr on two pipes, dying with us
    (`stdin`: a file descriptor, or subprocess.DEVNULL; `stdout`, `stderr`: the write ends of pipes the
    caller made, else new ones; `enter`: run in the child before exec, plain system calls only: the loop's
    cgroup, `process/cgroup.py`).

    FileNotFoundError / PermissionError / NotADirectoryError from exec propagate unchanged.
    The Reaper, not Popen.wait(), collects the exit status (see Reaper.adopt).
    """
    if not argv:
        raise ValueError("spawn: empty command")
    if threading.current_thread() is not threading.main_thread():
        log.warning("spawn_from_worker_thread", thread=threading.current_thread().name,
                    note="the child gets SIGKILL when this thread exits")
    parent_pid = os.getpid()

    def arm_parent_death_signal() -> None:
        # Runs in the child between fork and exec.
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != parent_pid:
            # The supervisor died before prctl took effect: the signal will never come.
            os._exit(ORPHANED_EXIT)
        if enter is not None:
            enter()

    return subprocess.Popen(  # noqa: S603 - running the user's command is the point
        argv,
        cwd=str(cwd),
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=arm_parent_death_signal,  # noqa: PLW1509 - see module docstring
        close_fds=True,
    )
