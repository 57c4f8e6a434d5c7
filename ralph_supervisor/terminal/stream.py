"""A text stream that hands whole lines to an outlet: for structlog's console, `sys.stderr`, rich.

    console = rich.console.Console(file=LineStream(outlet))
"""

from __future__ import annotations

import threading
from typing import Protocol


class LineSink(Protocol):
    """What a LineStream writes to (an `Outlet`)."""

    fd: int
    is_tty: bool

    def line(self, data: bytes) -> None: ...

    def drained(self) -> bool: ...


class LineStream:
    """Whole lines to the outlet, whichever thread writes; a partial line waits for its end (or `flush`)."""

    def __init__(self, outlet: LineSink, encoding: str = "utf-8") -> None:
        self.outlet = outlet
        self.encoding = encoding
        self.errors = "replace"
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            whole = self._partial + text
            end = whole.rfind("\n") + 1
            self._partial = whole[end:]
        if end:
            self.outlet.line(whole[:end].encode(self.encoding, self.errors))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            text, self._partial = self._partial, ""
        if text:
            self.outlet.line(text.encode(self.encoding, self.errors))

    def drained(self) -> bool:
        with self._lock:
            partial = self._partial
        return not partial and self.outlet.drained()

    def isatty(self) -> bool:
        return self.outlet.is_tty

    def fileno(self) -> int:
        return self.outlet.fd

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return False
