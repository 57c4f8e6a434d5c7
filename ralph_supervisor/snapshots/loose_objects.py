"""The store's loose objects, read and written by hand: a git object's type, size and content, zlib-compressed in
`objects/xx/yyyy…` under the SHA-1 of the uncompressed bytes, as git itself stores them.

A snapshot of a running loop touches a handful of objects (the files that changed, the folders on their way, the
commit); writing and reading those here spares the machine a git process for each. Only SHA-1 stores: a caller
with an id of another length asks git.

    blob = write_loose(store / "objects", b"blob", b"hello\\n")   # 'ce01362503…', the id `git hash-object` gives
    read_loose(store / "objects", blob, b"blob")                  # b'hello\\n'; None where it is not loose
"""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

from ralph_supervisor.store import atomic_write_bytes, read_all


def object_id(kind: bytes, body: bytes) -> str:
    """The id git gives an object of type `kind` and content `body`. Pure."""
    return hashlib.sha1(b"%s %d\0" % (kind, len(body)) + body, usedforsecurity=False).hexdigest()


def read_loose(objects: Path, oid: str, kind: bytes) -> bytes | None:
    """The content of the loose object `oid` of type `kind`; None where there is none, or it is another type or
    damaged (git reads it then, from a pack or not at all)."""
    try:
        fd = os.open(os.path.join(objects, oid[:2], oid[2:]), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = zlib.decompress(read_all(fd))
    except (OSError, zlib.error, ValueError):
        return None
    finally:
        os.close(fd)
    header, _, body = raw.partition(b"\0")
    if header != b"%s %d" % (kind, len(body)):
        return None
    return body


def write_loose(objects: Path, kind: bytes, body: bytes) -> str:
    """Store an object of type `kind` and content `body` as a loose object, unless the store holds it loose
    already; its id. Read-only as git makes them, without fsync as git writes loose objects by default. Raises
    OSError (a full disk, a read-only store): the caller says which."""
    raw = b"%s %d\0" % (kind, len(body)) + body
    oid = hashlib.sha1(raw, usedforsecurity=False).hexdigest()
    path = objects / oid[:2] / oid[2:]
    if not os.path.exists(path):
        atomic_write_bytes(path, zlib.compress(raw), 0o444, durable=False, make_folder=True)
    return oid


__all__ = ["object_id", "read_loose", "write_loose"]
