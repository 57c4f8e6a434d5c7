"""The `--on-open-hook`: a shell command run on every open, the decision JSON on its stdin.

Hooks are the user's programs: slow, hung or noisy ones must never stall supervision. `run_hook` runs one
with a timeout in its own process group (killed whole on timeout, and when it exits with children left in
the background); `HookRunner` runs it off the event loop, keeps its processes out of the supervised tree,
and kills what is still running when the supervisor leaves.

    >>> result = run_hook("cat > /dev/null", '{"trigger": "no-progress"}', cwd=Path("."), timeout=5)
    >>> result.ok
    True
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from ralph_supervisor.process.helpers import HELPERS

log = structlog.get_logger(__name__)

_TAIL_BYTES = 4096


@dataclass(frozen=True)
class HookResult:
    """How the hook ended. `code` is None when it could not start; negative when a signal ended it."""

    ok: bool
    code: int | None
    timed_out: bool
    stderr_tail: str


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_hook(cmd: str, decision_json: str, *, cwd: Path, timeout: float = 30.0,
             on_spawn: Callable[[subprocess.Popen[bytes]], None] | None = None) -> HookResult:
    """Run `cmd` through the shell with the decision JSON on stdin, for at most `timeout` seconds.

    The hook gets its own process group, so the whole group can be killed: on timeout, and also
    when the hook exits while children it left in the background still run (a hook is a short
    command; to start something lasting it must detach on purpose, e.g. with `setsid`). We never wait
    for EOF on its pipes, so a background child holding stderr open cannot hang us. Its stdout is
    discarded; the last few KB of its stderr come back in `stderr_tail` for the `hook_failed` event.
    `on_spawn` sees the process first: the supervisor keeps it out of the supervised tree and lets
    its reaper (the one waitpid caller) hand the exit status back.
    """
    data = decision_json.encode("utf-8")
    try:
        # Its own process group (to kill it whole) but our session: the supervisor's reaper leaves
        # children of its own session alone, so the exit status stays ours to read.
        proc = HELPERS.popen(cmd, shell=True, cwd=cwd, stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, process_group=0)
    except OSError as exc:
        return HookResult(ok=False, code=None, timed_out=False, stderr_tail=f"cannot start hook: {exc}")
    if on_spawn is not None:
        on_spawn(proc)
    assert proc.stdin is not None and proc.stderr is not None
    deadline = time.monotonic() + max(0.0, timeout)
    tail = bytearray()
    sel = selectors.DefaultSelector()
    stdin_fd, stderr_fd = proc.stdin.fileno(), proc.stderr.fileno()
    os.set_blocking(stdin_fd, False)
    os.set_blocking(stderr_fd, False)
    sel.register(stderr_fd, selectors.EVENT_READ)
    pending = memoryview(data)
    if pending:
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()

    def close_stdin() -> None:
        if stdin_fd in sel.get_map():
            sel.unregister(stdin_fd)
        try:
            proc.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    def read_stderr() -> int:
        """Read what is there: the byte count, 0 when nothing is waiting, -1 at EOF."""
        try:
            chunk = os.read(stderr_fd, 65536)
        except BlockingIOError:
            return 0
        except OSError:
            return -1
        if not chunk:
            return -1
        tail.extend(chunk)
        del tail[:-_TAIL_BYTES]
        return len(chunk)

    timed_out = False
    try:
        while proc.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            if not sel.get_map():
                time.sleep(min(remaining, 0.02))
                continue
            for key, _ in sel.select(min(remaining, 0.02)):
                if key.fd == stdin_fd:
                    try:
                        written = os.write(stdin_fd, pending)
                        pending = pending[written:]
                        if not pending:
                            close_stdin()
                    except BlockingIOError:
                        pass
                    except OSError:  # the hook does not read its stdin: fine
                        close_stdin()
                elif read_stderr() < 0:
                    sel.unregister(stderr_fd)
        # Whatever is left of its group dies with it (or with the timeout).
        _kill_group(proc.pid)
        if timed_out:
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        for _ in range(64):  # drain what was already written, never waiting for EOF
            if stderr_fd not in sel.get_map() or read_stderr() <= 0:
                break
    finally:
        close_stdin()
        sel.close()
        proc.stderr.close()
        if proc.returncode is not None:
            HELPERS.done(proc.pid)  # waited for: its pid may be reused
    code = proc.returncode
    text = tail.decode("utf-8", "replace").strip()
    if timed_out:
        text = (text + "\n" if text else "") + f"hook timed out after {timeout:g}s and was killed"
    return HookResult(ok=(code == 0 and not timed_out), code=code, timed_out=timed_out,
                      stderr_tail=text[-2000:])


class HookRunner:
    """Runs `--on-open-hook` off the event loop; its processes are not part of the supervised tree."""

    def __init__(self, command: str | None, *, cwd: Path, timeout: float,
                 on_spawn: Callable[[int], None] = lambda pid: None) -> None:
        self.command = command
        self._cwd = cwd
        self._timeout = timeout
        self._on_spawn = on_spawn
        self._pids: set[int] = set()
        """Hooks still running (their pids lead their own process groups), for `kill_all`: added on the
        executor's thread that spawns the hook, read on the event loop, so behind `_lock`."""
        self._lock = threading.Lock()

    @property
    def pids(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._pids)

    async def run(self, payload: str, iteration: int) -> HookResult | None:
        """Run the hook once with `payload` on its stdin; None when no hook is set. Logs `hook_failed`."""
        if not self.command:
            return None

        started: list[int] = []

        def spawned(popen: subprocess.Popen[bytes]) -> None:
            started.append(popen.pid)
            with self._lock:
                self._pids.add(popen.pid)
            self._on_spawn(popen.pid)

        try:
            result = await asyncio.to_thread(run_hook, self.command, payload, cwd=self._cwd,
                                             timeout=self._timeout, on_spawn=spawned)
        finally:
            with self._lock:
                self._pids.difference_update(started)  # reaped by run_hook: the pid may be reused
        if not result.ok:
            log.warning("hook_failed", command=self.command, code=result.code, timed_out=result.timed_out,
                        stderr=result.stderr_tail, iteration=iteration)
        return result

    def kill_all(self) -> None:
        """SIGKILL the process group of every hook still running (hooks lead their own group)."""
        for pid in self.pids:
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
            except OSError:
                with self._lock:
                    self._pids.discard(pid)
