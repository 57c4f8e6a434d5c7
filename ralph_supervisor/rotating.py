"""A file that rotates by size under a total disk budget, and never raises on a write.

Used for everything we append without end: the child's output (`child.log`), the structured log
(`events.jsonl`) and the breaker history (`history.jsonl`). Appending is the only write, so a
file is never rewritten whole; the oldest rotated file is deleted once the budget is spent.
A full or read-only disk costs us the bytes (counted in `dropped_bytes`), never the supervision.

A file deleted or replaced under us (`rm -rf` of the state folder, an editor saving over it) is noticed at
the next write, at most CHECK_EVERY_S after the last look: the path is opened afresh and what was written
since that look is copied over from the old file (still open, so still readable), so nothing written after
the loss is lost. Each loss is queued for the supervisor to report (`take_losses`): a writer cannot log it
itself, since events.jsonl is one of these files.
"""

from __future__ import annotations

import collections
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Callable

MAX_ROTATED = 1000
"""Rotated files are NAME.1 (newest) to NAME.N (oldest); readers look this far at most."""

_EVENT_NAME = re.compile(rb'"event": "([a-z_]+)"')
CHECK_EVERY_S = 0.2
"""How often (at most) a write looks whether its file is still the one at its path: one stat."""
COPY_MAX = 64 << 20
"""At most this much written since the last look is copied to a recreated file."""
_LOSSES: collections.deque[Path] = collections.deque(maxlen=1000)


def rotated_path(path: Path, index: int) -> Path:
    """The `index`th rotated file of `path` (1 is the newest): `NAME.1`, `NAME.2`, ..."""
    return path.with_name(f"{path.name}.{index}")


def take_losses() -> list[Path]:
    """The files found deleted or replaced (and recreated) since the last call, oldest first."""
    taken = []
    while True:
        try:
            taken.append(_LOSSES.popleft())
        except IndexError:
            return taken


class RotatingFile:
    """Append-only `path`, rotated to `path.1`, `path.2`, ... when it would exceed `max_bytes`.

    `total_bytes` bounds the current file and its rotated files together. Lines (when
    `whole_lines` is set) are never split across two files, so every JSON-lines file stays valid.
    """

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        total_bytes: int,
        *,
        whole_lines: bool = False,
        on_error: Callable[[OSError], None] | None = None,
        mode: int = 0o644,
    ) -> None:
        self.path = path
        self.mode = mode
        """Of a file this creates (child.log: 0600, it holds what the agent printed, credentials and all)."""
        self.max_bytes = max(1, max_bytes)
        self.keep = max(0, total_bytes // self.max_bytes - 1)
        self.whole_lines = whole_lines
        self.dropped_bytes = 0
        self._on_error = on_error
        self._failed = False
        self._fd: int | None = None
        self._size = 0
        self._checked_size = 0
        """The file's size when it was last found at its path: what came after is copied if it goes."""
        self._checked_at = 0.0

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, self.mode)
            st = os.fstat(self._fd)
            if st.st_mode & 0o777 & ~self.mode:  # an older, more open file (a child.log of 0644)
                try:
                    os.fchmod(self._fd, self.mode)
                except OSError:
                    pass
            self._size = self._checked_size = st.st_size
            self._checked_at = time.monotonic()
        return self._fd

    def _still_there(self) -> None:
        """Reopen the path if the open file is no longer the one there (see the module docstring)."""
        fd = self._fd
        if fd is None:
            return
        now = time.monotonic()
        if now - self._checked_at < CHECK_EVERY_S:
            return
        self._checked_at = now
        try:
            mine = os.fstat(fd)
            there = os.stat(self.path)
            if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                self._checked_size = mine.st_size
                return
        except FileNotFoundError:
            pass
        except OSError:
            return
        try:
            new = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, self.mode)
        except OSError:
            return  # its folder is gone too: go on writing to the old file, copied once the folder is back
        try:
            offset, end = self._checked_size, min(mine.st_size, self._checked_size + COPY_MAX)
            while offset < end:
                chunk = os.pread(fd, min(1 << 20, end - offset), offset)
                if not chunk:
                    break
                os.write(new, chunk)
                offset += len(chunk)
        except OSError:
            pass
        os.close(fd)
        self._fd = new
        self._size = self._checked_size = os.fstat(new).st_size
        _LOSSES.append(self.path)

    def _rotate(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.keep == 0:
            os.unlink(self.path)
        else:
            oldest = rotated_path(self.path, self.keep)
            if oldest.exists():
                oldest.unlink()
            for index in range(self.keep - 1, 0, -1):
                older = rotated_path(self.path, index)
                if older.exists():
                    older.rename(rotated_path(self.path, index + 1))
            self.path.rename(rotated_path(self.path, 1))
        self._size = 0

    def write(self, data: bytes) -> None:
        """Append `data`, rotating as needed. Errors are reported once and the bytes dropped."""
        if not data:
            return
        start = None
        try:
            self._still_there()
            fd = self._open()
            start = self._size
            view = memoryview(data)
            while view:
                room = self.max_bytes - self._size
                if room <= 0 or (self.whole_lines and len(view) > room and self._size > 0):
                    self._rotate()
                    fd = self._open()
                    room = self.max_bytes
                piece = view if self.whole_lines else view[:room]
                written = os.write(fd, piece)
                self._size += written
                view = view[written:]
            if self._failed:
                self._failed = False
        except OSError as exc:
            self.dropped_bytes += len(data)
            if self.whole_lines and self._fd is not None and start is not None and self._size > start:
                try:  # a short write then ENOSPC: take the half line back, so the file stays whole lines
                    os.ftruncate(self._fd, start)
                    self._size = start
                except OSError:
                    pass
            if not self._failed:
                self._failed = True
                if self._on_error is not None:
                    self._on_error(exc)
            self.close()  # reopened (and re-measured) on the next write

    def sync(self) -> None:
        """fsync what was written (a failure is the next write's to report)."""
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError:
                pass

    def close(self) -> None:
        self._checked_at = float("-inf")
        try:
            self._still_there()  # the last bytes must not stay in a deleted file
        except OSError:
            pass
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def files(self) -> list[Path]:
        """The current file and its rotated files that exist, newest first."""
        names = [self.path] + [rotated_path(self.path, i) for i in range(1, self.keep + 1)]
        return [p for p in names if p.exists()]


def rotated_files(path: Path) -> list[Path]:
    """`path` and its rotated files that exist, oldest first."""
    older: list[Path] = []
    for index in range(1, MAX_ROTATED + 1):
        candidate = rotated_path(path, index)
        if not candidate.exists():
            break
        older.append(candidate)
    return [*reversed(older), *([path] if path.exists() else [])]


def tail_lines(path: Path, max_bytes: int, *, last_unended: bool = False) -> tuple[list[bytes], int]:
    """Complete lines in the last `max_bytes` of the file, and the offset just after the last newline.

    Seeks from the end, so a huge file costs what its tail costs. A first line cut by the window is
    dropped; a last line without its newline (being written) is left for the next read, or, with
    `last_unended` (a reader that reads once), is the last line. Raises OSError.
    """
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        fh.seek(start)
        data = fh.read(size - start)
    lines, offset = complete_lines(data, start, cut_first=start > 0)
    rest = data[offset - start:]
    if last_unended and rest and not (start > 0 and offset == start):  # (a window inside one long line: cut)
        lines.append(rest)
    return lines, offset


def complete_lines(data: bytes, start: int, *, cut_first: bool) -> tuple[list[bytes], int]:
    """The whole lines of `data` (read from offset `start`), and the offset after the last newline."""
    last_newline = data.rfind(b"\n")
    if last_newline < 0:
        return [], start
    body = data[: last_newline + 1]
    lines = body.split(b"\n")[:-1]
    if cut_first and lines:
        lines = lines[1:]
    return lines, start + last_newline + 1


def read_json_lines(path: Path, wanted: frozenset[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON objects of `path` and its rotated files, oldest first, and one warning per damaged file.

    With `wanted`, only lines whose `event` is one of those names are parsed (a cheap regex first), so a
    long structured log costs what its interesting lines cost. The last line of the live file may be
    being written: a cut last line there is not damage.
    """
    records: list[dict[str, Any]] = []
    warnings: list[str] = []
    files = rotated_files(path)
    for file in files:
        try:
            data = file.read_bytes()
        except OSError as exc:
            warnings.append(f"{file.name} is unreadable ({exc.strerror or exc}): skipped")
            continue
        lines = data.split(b"\n")
        partial_tail = file == path and not data.endswith(b"\n")
        bad: list[int] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if wanted is not None:
                name = _EVENT_NAME.search(line)
                if name is not None and name.group(1).decode() not in wanted:
                    continue
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):
                if not (partial_tail and number == len(lines)):
                    bad.append(number)
                continue
            if not isinstance(value, dict):
                bad.append(number)
            elif wanted is None or value.get("event") in wanted:
                records.append(value)
        if bad:
            what = "line is" if len(bad) == 1 else "lines are"
            warnings.append(f"{file.name}: {len(bad)} {what} not a JSON object (line {bad[0]}"
                            + (", ..." if len(bad) > 1 else "") + "): skipped, the rest is reported")
    return records, warnings
