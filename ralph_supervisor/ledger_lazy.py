"""A long ledger's attempts kept as the objects they were read as; an Attempt is built when one is read.

ledger.py checks a long ledger's attempts a field at a time, each pass in C over the decoded JSON objects.
Making a tuple of 10,000 Attempts out of them would cost a check a twentieth of its time, and `check` reads few
of them: the count, the token total (which the checks summed) and the run of failures at the end (whose fields
are read straight from the objects, last first). LazyAttempts stands for that tuple of Attempts and is read like
it: by index, by slice (any step), forwards, backwards; it is equal to it, hashes like it and is shown like it.

    >>> attempts = LazyAttempts([{"action": "a", "outcome": "noop"}, {"action": "b", "outcome": "failure",
    ...                          "error": "boom", "tokensUsed": 2, "iteration": 7}])
    >>> attempts[-1], len(attempts), attempts.tokens_used
    (Attempt(action='b', outcome='failure', error='boom', tokens_used=2, iteration=7), 2, 2)
"""

from __future__ import annotations

from itertools import repeat

from ralph_supervisor.ledger import ATTEMPT_KEYS, Attempt, built_attempts

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a check's start-up more than its decision
    from collections.abc import Iterator
    from typing import Any

_get = dict.get
_KEYS = dict(zip(Attempt._fields, ATTEMPT_KEYS))


class LazyAttempts:
    """Attempts as the JSON objects they were read from, each already checked plainly well formed (ledger.py's
    `_checked_total`): `action` and `outcome` are there, `error` and `tokensUsed` are there or left out, and
    `iteration` is anything. The list is this object's own: nothing else holds it, and nothing here changes it."""

    __slots__ = ("_items", "_total")

    def __init__(self, items: list[dict[str, Any]], tokens_used: int | None = None) -> None:
        self._items = items
        self._total = tokens_used

    @property
    def tokens_used(self) -> int:
        """The attempts' tokens summed (the checks pass the sum they made)."""
        if self._total is None:
            self._total = sum(map(_get, self._items, repeat("tokensUsed"), repeat(0)))
        return self._total

    def from_last(self, field: str) -> Iterator[Any]:
        """One field of every attempt (an Attempt's field name), last first, read at C speed from the objects:
        the rules walk back over the failures at the end without building an Attempt."""
        key, default = _KEYS[field]
        return map(_get, reversed(self._items), repeat(key), repeat(default))

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: Any) -> Any:
        """The Attempt at `index`, or for a slice the attempts in it (another LazyAttempts)."""
        if isinstance(index, slice):
            return LazyAttempts(self._items[index])
        item = self._items[index]
        return tuple.__new__(Attempt, (item["action"], item["outcome"], _get(item, "error"),
                                       _get(item, "tokensUsed", 0), _get(item, "iteration")))

    def __iter__(self) -> Iterator[Attempt]:
        return built_attempts(self._items)

    def __reversed__(self) -> Iterator[Attempt]:
        return built_attempts(self._items[::-1])

    def __eq__(self, other: object) -> bool:
        """Equal to the tuple of Attempts it stands for (and to lazy attempts that stand for the same)."""
        if isinstance(other, LazyAttempts):
            other = tuple(other)
        if not isinstance(other, tuple):
            return NotImplemented
        return len(self) == len(other) and tuple(self) == other

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def index(self, value: Any, *bounds: int) -> int:
        return tuple(self).index(value, *bounds)

    def count(self, value: Any) -> int:
        return tuple(self).count(value)
