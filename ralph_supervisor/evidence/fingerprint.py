"""The workspace's fingerprint: which state the whole workspace is in, kept up to date change by change.

Progress is a state not seen before in this run, so flipping a file between two contents (undo, redo) is
not progress. To know the state without rescanning, the fingerprint is a sum over paths, modulo 2**128, of
a hash of (path, content state); a change of one path from state A to state B adds `h(path, B) - h(path, A)`.
Changes of different paths commute, so the fingerprint depends only on where each path ends, and the cost
of an iteration is in proportion to what changed. The run's start is the fingerprint 0 (every path in its
first state); a path whose first state was never seen (not hashed before its first write) counts from an
`UNSEEN` state, so going back to that first content is seen as new once, and recognised after that.

`Returns` remembers the fingerprint each iteration ended in (bounded) and says which earlier iteration a
state returns to.

    >>> fp = Fingerprint()
    >>> fp.change("src/a.py", b"Hx=1", b"Hx=2"); fp.change("src/a.py", b"Hx=2", b"Hx=1")
    >>> fp.value
    0
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

MODULUS = 1 << 128
UNSEEN = b"?"
"""The state of a path whose content before its first change was never read."""
RETURNS_KEPT = 10_000
"""How many iterations' end states `Returns` remembers (the oldest are forgotten first)."""


def term(path: str, state: bytes) -> int:
    """One path's share of the fingerprint in one state."""
    digest = hashlib.blake2b(path.encode("utf-8", "surrogateescape") + b"\0" + state, digest_size=16).digest()
    return int.from_bytes(digest, "big")


class Fingerprint:
    """The running fingerprint. Not thread-safe: the workspace updates it under its own lock."""

    def __init__(self) -> None:
        self.value = 0

    def change(self, path: str, before: bytes | None, after: bytes) -> None:
        """A path went from `before` (None: never seen) to `after`."""
        old = UNSEEN if before is None else before
        if old == after:
            return
        self.value = (self.value + term(path, after) - term(path, old)) % MODULUS


def rewound(value: int, changes: list[tuple[str, bytes | None, bytes]]) -> int:
    """The fingerprint before `changes` (path, before, after) were made, from the one after them. Pure."""
    for path, before, after in changes:
        old = UNSEEN if before is None else before
        if old != after:
            value = (value - term(path, after) + term(path, old)) % MODULUS
    return value


class Returns:
    """The state each iteration ended in; whether a new end state was seen before (and after which iteration)."""

    def __init__(self, kept: int = RETURNS_KEPT) -> None:
        self._first: OrderedDict[int, int] = OrderedDict({0: 0})
        self._kept = max(1, kept)

    def record(self, iteration: int, fingerprint: int) -> int | None:
        """Remember that `iteration` ended in `fingerprint`; the earlier iteration that ended there (0: the
        run's start), or None when the state is new."""
        earlier = self._first.get(fingerprint)
        if earlier is not None:
            self._first.move_to_end(fingerprint)
            return earlier
        self._first[fingerprint] = iteration
        while len(self._first) > self._kept:
            self._first.popitem(last=False)
        return None

    def __len__(self) -> int:
        return len(self._first)
