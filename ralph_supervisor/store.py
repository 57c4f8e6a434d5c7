"""Primitives for the state folder's files (their owners are the modules of `files/`).

Every file we rewrite is written atomically (temp file, rename), so a crash of the supervisor or a full
disk leaves either the old or the new content, never half of one. A durable write (the default) also
fsyncs the file and the folder, so the new content survives a crash of the machine too; bookkeeping
rewritten at every agent call (the breaker's counters, the ledger, the day's spend, the tree's members)
is written without (`durable=False`): a crash of the machine may then keep the previous version of such
a file, never half of one that a reader trusts. A file we cannot trust is moved aside under one naming
scheme, `NAME.corrupt-<UTC time>` (`move_aside`), never deleted and never trusted.

    >>> atomic_write_json(Path("/tmp/example.json"), {"a": 1})
    >>> read_json_object(Path("/tmp/example.json"))
    {'a': 1}
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def iso_utc(epoch: float | None = None) -> str:
    """ISO-8601 UTC with milliseconds, e.g. 2026-11-30T22:24:00.123Z (the time format of every file)."""
    moment = datetime.fromtimestamp(time.time() if epoch is None else epoch, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def utc_day(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d")


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (os.write may take less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_all(fd: int) -> bytes:
    """Everything left to read from `fd`, in one os.read a mebibyte at a time (no file object around it)."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True,
                       make_folder: bool = False) -> None:
    """Write `data` to `path` atomically: a temp file in the same folder, (fsync,) rename, (fsync of the
    folder). A reader (or a crash) sees the old content or the new, never half of one; `durable` adds the two
    fsyncs, so that the new content also survives a crash of the machine. The temp file is named by process
    and thread (two writers never share one; no random name to draw: this runs several times per call).
    `make_folder`: a missing folder is made (`open_making_folder`)."""
    tmp = path.parent / f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = open_making_folder(tmp, flags, 0o600) if make_folder else os.open(tmp, flags, 0o600)
    try:
        os.fchmod(fd, mode)
        write_all(fd, data)
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if not durable:
        return
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def open_making_folder(path: Path, flags: int, mode: int) -> int:
    """`os.open`, and where the folder is missing, make it (with its parents) and open once more. A folder that
    exists costs nothing, where a `mkdir` before every open would cost a system call that takes its lock."""
    try:
        return os.open(path, flags, mode)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, mode)


def atomic_write_text(path: Path, text: str, *, durable: bool = True, make_folder: bool = False) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable, make_folder=make_folder)


def atomic_write_json(path: Path, data: Any, *, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n", durable=durable)


class CorruptFile(Exception):
    """A state file we cannot trust; `moved_to` is where it was put aside (None if it could not be)."""

    def __init__(self, path: Path, problem: str, moved_to: Path | None) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.moved_to = moved_to


def move_aside(path: Path) -> Path | None:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    try:
        os.replace(path, target)
        return target
    except OSError:
        return None


def read_json_object(path: Path) -> dict[str, Any] | None:
    """Read a JSON object; None when the file does not exist; CorruptFile (after moving it aside) when bad."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptFile(path, f"unreadable ({exc.strerror or exc})", None) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8, bad JSON, huge ints, deep nesting
        raise CorruptFile(path, f"not valid JSON ({str(exc)[:200]})", move_aside(path)) from None
    if not isinstance(data, dict):
        raise CorruptFile(path, "not a JSON object", move_aside(path))
    return data


def folder_bytes(path: str | Path) -> int:
    """What the files under `path` take (apparent sizes, symlinks not followed); files that vanish meanwhile
    count nothing."""
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total
