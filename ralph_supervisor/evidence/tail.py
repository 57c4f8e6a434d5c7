"""Following the agent's own log files (Ralph writes each call to a new `claude_output_*.log`).

Polled, not watched: the files are few, and a poll every quarter second costs a `glob` and a
`stat` per file. Files that existed before the supervisor started are followed from their end;
files that appear later are read from their beginning. Each poll reads a bounded amount per file,
so a huge file never stalls the event loop.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MAX_READ_PER_POLL = 4 << 20
MAX_FILES = 256


@dataclass
class _Followed:
    path: str
    inode: int
    offset: int


class Tailer:
    """Reads new bytes from files matching globs (relative to the workspace) and passes them on."""

    def __init__(self, root: Path, globs: tuple[str, ...], deliver: Callable[[str, bytes], None]) -> None:
        self.root = root
        self.globs = globs
        self._deliver = deliver
        self._files: dict[str, _Followed] = {}
        self._primed = False

    def _matches(self) -> list[str]:
        found: list[str] = []
        for pattern in self.globs:
            full = pattern if os.path.isabs(pattern) else str(self.root / pattern)
            found.extend(glob.glob(full, recursive=True))
        return sorted(set(found))[-MAX_FILES:]

    @property
    def following(self) -> bool:
        """Some file matched the globs and is followed now."""
        return bool(self._files)

    def poll(self) -> int:
        """Read what is new; returns the number of bytes delivered."""
        delivered = 0
        paths = self._matches()
        for path in paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            followed = self._files.get(path)
            if followed is None or followed.inode != st.st_ino or st.st_size < followed.offset:
                start = st.st_size if not self._primed else 0
                followed = self._files[path] = _Followed(path, st.st_ino, start)
            if st.st_size <= followed.offset:
                continue
            try:
                with open(path, "rb") as fh:
                    fh.seek(followed.offset)
                    data = fh.read(min(MAX_READ_PER_POLL, st.st_size - followed.offset))
            except OSError:
                continue
            followed.offset += len(data)
            delivered += len(data)
            if data:
                self._deliver(f"tail:{os.path.relpath(path, self.root)}", data)
        self._primed = True
        if len(self._files) > MAX_FILES * 2:
            keep = set(paths)
            self._files = {p: f for p, f in self._files.items() if p in keep}
        return delivered
