"""A big ledger read by msgspec: decoded and validated in one pass in C, into small structs.

From a few megabytes on, reading with json costs `check` more than msgspec's import (about 20 ms, more than
a whole check of 1,000 attempts): json builds a dict per attempt that Python code then checks field by
field, while msgspec checks the types as it reads. Only a ledger msgspec reads exactly as `parse_ledger`
would is taken: every field declared as strictly as ledger.py checks it, and no key beyond them. msgspec
refuses the rest (a `tokensUsed` of 5.0, an extra key, a lone surrogate, a malformed document), and
ledger.py reads those itself, with its own one-line errors. Without msgspec installed, ledger.py reads
everything.

A ledger in plain ASCII (as loop-context and the supervisor write one in English) is read leaner: each attempt's
`iteration`, which no rule reads and ledger.py takes as any value, and any key beyond the known ones, which
ledger.py ignores, are skipped unread instead of refused. msgspec's skipping checks a value's JSON as its decoding
would, but not its UTF-8, which plain ASCII cannot get wrong, and it reads a number of any length, where Python
refuses an integer of more than 4,300 digits (`sys.get_int_max_str_digits`) and ledger.py with it: a document
that may hold one (`_may_hold_long_number`) is read strictly. At 100,000 attempts this takes about 4 ms (a ninth)
off the decoding and 1,200 pages off the memory, for a look at the bytes of about 1 ms (nearly all of it `isascii`). Its attempts
(LeanAttempt) have no `iteration`.

    >>> decode('{"goal": "g", "attempts": [{"action": "a", "outcome": "noop"}]}').attempts[0].outcome
    'noop'
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from ralph_supervisor.ledger import MAX_SAFE_INTEGER, Ledger


class BigAttempt(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True, kw_only=True):
    """An attempt with ledger.Attempt's fields, as strict as ledger.py's checks or stricter. The fields are declared
    in the order loop-context and the supervisor write an attempt's keys: msgspec looks for the key after the last
    one found first (a 100,000-attempt ledger decodes about 2% quicker than with the keys in Attempt's order)."""

    iteration: int | None = None
    action: str
    outcome: Literal["success", "failure", "noop"]
    error: str | None = None
    tokens_used: Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INTEGER)] = msgspec.field(name="tokensUsed", default=0)


class LeanAttempt(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """An attempt of a ledger in plain ASCII: BigAttempt's fields but `iteration`, any other key skipped."""

    action: str
    outcome: Literal["success", "failure", "noop"]
    error: str | None = None
    tokens_used: Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INTEGER)] = msgspec.field(name="tokensUsed", default=0)


class _BigLedger(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    goal: str
    attempts: tuple[BigAttempt, ...]


class _LeanLedger(msgspec.Struct, gc=False):
    goal: str
    attempts: tuple[LeanAttempt, ...]


_decoder = msgspec.json.Decoder(_BigLedger)
_lean_decoder = msgspec.json.Decoder(_LeanLedger)


def decode(data: str | bytes) -> Ledger | None:
    """The ledger in `data` (JSON text or UTF-8 bytes), its attempts BigAttempt structs (LeanAttempt ones for
    plain ASCII); None when msgspec refuses it (ledger.py then reads it and says what is wrong, or takes what
    msgspec is stricter about)."""
    lean = data.isascii() and not _may_hold_long_number(data if isinstance(data, bytes) else data.encode("ascii"))
    try:
        big = (_lean_decoder if lean else _decoder).decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return Ledger(big.goal, big.attempts)  # type: ignore[arg-type]  # the structs read as Attempts


LONGEST_NUMBER = 4300
"""The most digits Python reads an integer of (its default `sys.get_int_max_str_digits`)."""
_STRIDE = (LONGEST_NUMBER + 1) // 2
_DIGIT_MARKS = bytes(49 if 48 <= b <= 57 else 48 for b in range(256))  # b"1" for a digit, b"0" for the rest


def _may_hold_long_number(data: bytes) -> bool:
    """Whether `data` may hold more than LONGEST_NUMBER digits in a row. Every run that long covers two bytes of
    `data` at consecutive multiples of _STRIDE; each such pair of digits is looked at whole. Pure; under 0.1 ms
    for 17 MB of a ledger, whose numbers are short.

    >>> _may_hold_long_number(b'{"n": ' + b"7" * 4301 + b"}"), _may_hold_long_number(b'{"n": ' + b"7" * 4300 + b"}")
    (True, False)
    """
    marks = data[::_STRIDE].translate(_DIGIT_MARKS)
    at = marks.find(b"11")
    while at >= 0:
        start = at * _STRIDE
        end = start + _STRIDE + 1
        while start > 0 and 48 <= data[start - 1] <= 57:  # the whole run the pair lies in
            start -= 1
        while end < len(data) and 48 <= data[end] <= 57:
            end += 1
        if end - start > LONGEST_NUMBER and data[at * _STRIDE:(at + 1) * _STRIDE + 1].isdigit():
            return True
        at = marks.find(b"11", at + 1)
    return False
