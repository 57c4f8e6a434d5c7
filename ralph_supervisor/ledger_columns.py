"""A long ledger's attempts kept as the columns they were checked in; an Attempt is built when one is read.

ledger.py checks a long ledger a field at a time: a list of every action, of every outcome, and so on. Making a
tuple of 10,000 Attempts out of those lists would cost a check a twentieth of its time, and `check` reads few of
them: the count, the token total (summed here from its column) and the run of failures at the end (read off the
outcome column). AttemptColumns stands for that tuple of Attempts and is read like it: by index, by slice (any
step), forwards, backwards; it is equal to it, hashes like it and is shown like it.

    >>> columns = AttemptColumns(["a", "b"], ["noop", "failure"], [None, "boom"], [1, 2], [{}, {"iteration": 7}])
    >>> columns[-1], len(columns), columns.tokens_used
    (Attempt(action='b', outcome='failure', error='boom', tokens_used=2, iteration=7), 2, 3)
"""

from __future__ import annotations

from itertools import repeat

from ralph_supervisor.ledger import Attempt

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs a check's start-up more than its decision
    from collections.abc import Iterator
    from typing import Any

_new = tuple.__new__
_get = dict.get
_COLUMNS = {"action": "_actions", "outcome": "_outcomes", "error": "_errors", "tokens_used": "_tokens"}


class AttemptColumns:
    """Attempts as five columns: actions, outcomes, errors and tokens as checked, and the attempts' objects as read
    (whose `iteration`, kept as given and seldom read, is looked up only when an Attempt is built). The lists are
    this object's own: nothing else holds them, and nothing here changes them."""

    __slots__ = ("_actions", "_outcomes", "_errors", "_tokens", "_items", "_total")

    def __init__(self, actions: list[str], outcomes: list[str], errors: list[str | None], tokens: list[int],
                 items: list[dict[str, Any]], tokens_used: int | None = None) -> None:
        self._actions = actions
        self._outcomes = outcomes
        self._errors = errors
        self._tokens = tokens
        self._items = items
        self._total = tokens_used

    @property
    def tokens_used(self) -> int:
        """The attempts' tokens summed, from the column (the checks pass the sum they made)."""
        if self._total is None:
            self._total = sum(self._tokens)
        return self._total

    def from_last(self, field: str) -> Iterator[Any]:
        """One field of every attempt (an Attempt's field name), last first, read off its column: the rules walk
        back over the failures at the end without building an Attempt."""
        if field == "iteration":
            return map(_get, reversed(self._items), repeat("iteration"))
        return reversed(getattr(self, _COLUMNS[field]))

    def __len__(self) -> int:
        return len(self._outcomes)

    def __getitem__(self, index: Any) -> Any:
        """The Attempt at `index`, or for a slice the columns sliced (another AttemptColumns)."""
        if isinstance(index, slice):
            return AttemptColumns(self._actions[index], self._outcomes[index], self._errors[index],
                                  self._tokens[index], self._items[index])
        return _new(Attempt, (self._actions[index], self._outcomes[index], self._errors[index], self._tokens[index],
                              _get(self._items[index], "iteration")))

    def __iter__(self) -> Iterator[Attempt]:
        iterations = map(_get, self._items, repeat("iteration"))
        rows = zip(self._actions, self._outcomes, self._errors, self._tokens, iterations)
        return map(_new, repeat(Attempt), rows)

    def __reversed__(self) -> Iterator[Attempt]:
        rows = zip(reversed(self._actions), reversed(self._outcomes), reversed(self._errors), reversed(self._tokens),
                   map(_get, reversed(self._items), repeat("iteration")))
        return map(_new, repeat(Attempt), rows)

    def __eq__(self, other: object) -> bool:
        """Equal to the tuple of Attempts it stands for (and to columns that stand for the same)."""
        if isinstance(other, AttemptColumns):
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
