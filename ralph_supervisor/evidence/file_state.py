"""What a path holds, as comparable bytes: the states the workspace watcher compares and remembers.

A file changed when its state differs; its content is known by a BLAKE2b hash, so a rewrite with the same
bytes or a touch is no change. Never opens what is not a regular file (a FIFO would block us) and never
follows symlinks.

    >>> file_state(Path("/nonexistent")) == ABSENT
    True
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

ABSENT = b""
"""The state of a path that does not exist (a real state, unlike `None` = never seen)."""
HASH_LIMIT = 32 * 1024 * 1024
"""Files larger than this are identified by size and mtime instead of a content hash."""


def file_state(path: Path) -> bytes:
    """ABSENT, size and content hash (`H`), size and mtime of a big file (`B`), a link target (`L`), or a
    marker of another kind of file (`S`)."""
    try:
        st = os.lstat(path)
    except OSError:
        return ABSENT
    if stat.S_ISDIR(st.st_mode):
        return ABSENT  # directories are not files; their files are tracked one by one
    if stat.S_ISLNK(st.st_mode):
        try:
            return b"L" + os.fsencode(os.readlink(path))
        except OSError:
            return b"L?"
    if not stat.S_ISREG(st.st_mode):
        return b"S%o" % stat.S_IFMT(st.st_mode)
    if st.st_size > HASH_LIMIT:
        return b"B%d:%d" % (st.st_size, st.st_mtime_ns)
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return ABSENT if not os.path.lexists(path) else b"U%d:%d" % (st.st_size, st.st_mtime_ns)
    return b"H" + st.st_size.to_bytes(8, "big") + digest.digest()


def state_size(state: bytes | None) -> int | None:
    """The size in bytes a `file_state` value records (regular files only), else None. Pure."""
    if state is None:
        return None
    if state[:1] == b"H" and len(state) == 1 + 8 + 16:
        return int.from_bytes(state[1:9], "big")
    if state[:1] == b"B":
        try:
            return int(state[1:].split(b":", 1)[0])
        except ValueError:
            return None
    return None


def changed_at(path: Path, state: bytes) -> int:
    """When a change happened (epoch ns): the file's ctime where it still exists (the kernel stamped the
    write), else now (a deletion is seen after it happened, never before)."""
    now = time.time_ns()
    if state == ABSENT:
        return now
    try:
        return min(now, os.lstat(path).st_ctime_ns)
    except OSError:
        return now
