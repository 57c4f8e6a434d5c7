"""Where an outlet writes: its own non-blocking open of the terminal or pipe when it can have one.

O_NONBLOCK on the inherited descriptor would be shared with the shell that started us (and left behind for
it); an open of our own (`/proc/self/fd/N`) is ours alone. A socket (the journal) takes MSG_DONTWAIT per
call. A regular file, or anything we cannot reopen, gets blocking writes: the writer thread waits, never
the supervisor.

    sink = Sink(1)
    taken = sink.write(memoryview(data))    # 0: no room now
    if taken < len(data): sink.wait(0.1)
"""

from __future__ import annotations

import os
import select
import socket
import stat


class Sink:
    """One destination's file descriptor, written without waiting where it can be. Its outlet's writer
    thread's alone (and `close`'s, once that thread is gone)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.own: int | None = None
        self.sock: socket.socket | None = None
        try:
            found = os.fstat(fd)
        except OSError:
            return
        if stat.S_ISCHR(found.st_mode) or stat.S_ISFIFO(found.st_mode):
            try:
                own = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            except OSError:
                return
            mine = os.fstat(own)
            if (mine.st_dev, mine.st_ino, mine.st_rdev) == (found.st_dev, found.st_ino, found.st_rdev):
                self.own = own
            else:
                os.close(own)
        elif stat.S_ISSOCK(found.st_mode):
            try:
                self.sock = socket.socket(fileno=os.dup(fd))
            except OSError:
                pass

    @property
    def nonblocking(self) -> bool:
        return self.own is not None or self.sock is not None

    def write(self, data: memoryview) -> int:
        """Bytes taken; 0 when the terminal has no room now. OSError: it is gone."""
        try:
            if self.sock is not None:
                return self.sock.send(data, socket.MSG_DONTWAIT)
            return os.write(self.fd if self.own is None else self.own, data)
        except (BlockingIOError, InterruptedError):
            return 0

    def wait(self, timeout: float) -> None:
        """Until there is room (or `timeout`)."""
        if not self.nonblocking:
            return  # a blocking write waits by itself
        poller = select.poll()
        poller.register(self.sock.fileno() if self.sock is not None else self.own, select.POLLOUT)  # type: ignore[arg-type]
        poller.poll(timeout * 1000)

    def close(self) -> None:
        if self.own is not None:
            os.close(self.own)
            self.own = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
