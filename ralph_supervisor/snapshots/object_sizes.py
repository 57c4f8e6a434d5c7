"""The sizes of a store's objects, asked of one `git cat-file --batch-check` kept running.

A snapshot asks the sizes of the blobs its diff names (what the stored bytes grew or shrank by): a question
a snapshot, ten a second while a fast loop runs. A git started for each costs the supervisor a spawn, a
SIGCHLD and a reap; this one is started once per store and answers a line per object. It is a helper
(`process/helpers.py`): never the loop's, killed at the latest when the supervisor leaves. Where it cannot
answer (it died, it hangs, a question too big for the pipes), one `git cat-file` of its own answers instead,
through `Git.run` and its failures.

    sizes = ObjectSizes(git)
    sizes.of([b"8ab686eafeb1f44702738c8b0f24f2567c36da6d"])    # [12]: 0 for an object the store lacks
    sizes.close()
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time

from ralph_supervisor.process.helpers import HELPERS
from ralph_supervisor.safe_git import command as safe_command
from ralph_supervisor.snapshots.git import Git

FORMAT = "--batch-check=%(objectsize)"
ANSWER_WAIT_S = 30.0
"""The longest the running git may take to answer; then it is killed and a git of its own answers."""
MOST_AT_ONCE = 1000
"""Questions asked of the running git at once (41 bytes each): more go to a git of their own. Their answers
(a line of at most 20 bytes each) fit a pipe's buffer, so git never waits for us to read while we write."""


class ObjectSizes:
    """Object sizes from one running `git cat-file`, started at the first question (`keep_running`; else a git
    for each question, as a short-lived command wants: nothing of it outlives its answer). One thread asks at a
    time (the snapshot keeper's); `close` may come from another."""

    def __init__(self, git: Git, *, keep_running: bool = False) -> None:
        self._git = git
        self._keep_running = keep_running
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending = b""

    def of(self, shas: list[bytes]) -> list[int]:
        """The size of each object (hex ids), in order; 0 for one the store does not hold. Raises SnapshotError
        where no git can answer."""
        if not shas:
            return []
        if self._keep_running and len(shas) <= MOST_AT_ONCE:
            with self._lock:
                answers = self._ask(shas)
            if answers is not None:
                return answers
        out = self._git.run("cat-file", FORMAT, input=b"\n".join(shas) + b"\n")
        return [_size(line) for line in out.split(b"\n")[: len(shas)]]

    def close(self) -> None:
        """End the running git, if any (its input closed: it leaves at once), and wait for it."""
        with self._lock:
            self._stop()

    @property
    def pid(self) -> int | None:
        with self._lock:
            return self._proc.pid if self._proc is not None else None

    def _ask(self, shas: list[bytes]) -> list[int] | None:
        """The answers of the running git (started when there is none); None when it could not give them."""
        proc = self._proc if self._proc is not None else self._start()
        if proc is None:
            return None
        deadline = time.monotonic() + ANSWER_WAIT_S
        try:
            assert proc.stdin is not None and proc.stdout is not None
            written = _write_by(proc.stdin.fileno(), b"\n".join(shas) + b"\n", deadline)
            lines = self._read_lines(proc.stdout.fileno(), len(shas), deadline) if written else None
        except OSError:
            lines = None
        if lines is None:
            self._stop(hurry=True)
            return None
        return [_size(line) for line in lines]

    def _read_lines(self, fd: int, count: int, deadline: float) -> list[bytes] | None:
        """`count` lines of answers; None at the end of its output or past `deadline`."""
        buffer = self._pending
        while buffer.count(b"\n") < count:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            buffer += chunk
        lines = buffer.split(b"\n", count)
        self._pending = lines.pop() if len(lines) > count else b""
        return lines

    def _start(self) -> subprocess.Popen[bytes] | None:
        git = self._git
        argv = safe_command(git.git, ["cat-file", FORMAT], filters=git.filters)
        argv[1:1] = ["-C", str(git.work_tree)]
        try:
            self._proc = HELPERS.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, env=git.base_env, bufsize=0)
        except OSError:
            return None
        assert self._proc.stdin is not None
        os.set_blocking(self._proc.stdin.fileno(), False)  # a git that stopped reading cannot hold us (_write_by)
        self._pending = b""
        return self._proc

    def _stop(self, hurry: bool = False) -> None:
        """End the running git: its input closed, it leaves; killed where it does not within 2 s, or at once
        (`hurry`: it failed to answer)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if hurry:
            proc.kill()
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            HELPERS.done(proc.pid)


def _write_by(fd: int, data: bytes, deadline: float) -> bool:
    """All of `data` into the non-blocking `fd` before `deadline`; False when it could not be."""
    view = memoryview(data)
    while view:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([], [fd], [], left)[1]:
            return False
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            continue
    return True


def _size(line: bytes) -> int:
    """An answer's size: `<size>`, or 0 for `<id> missing` (and anything else unreadable). Pure."""
    line = line.strip()
    return int(line) if line.isdigit() else 0


__all__ = ["ANSWER_WAIT_S", "MOST_AT_ONCE", "ObjectSizes"]
