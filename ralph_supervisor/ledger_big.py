"""A big ledger read by msgspec: decoded and validated in one pass in C, into small structs.

From a few megabytes on, reading with json costs `check` more than msgspec's import (about 20 ms, more than
a whole check of 1,000 attempts): json builds a dict per attempt that Python code then checks field by
field, while msgspec checks the types as it reads. Only a ledger msgspec reads exactly as `parse_ledger`
would is taken: every field declared as strictly as ledger.py checks it, and no key beyond them. msgspec
refuses the rest (a `tokensUsed` of 5.0, an extra key, a lone surrogate, a malformed document), and
ledger.py reads those itself, with its own one-line errors. Without msgspec installed, ledger.py reads
everything.

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


class _BigLedger(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    goal: str
    attempts: tuple[BigAttempt, ...]


_decoder = msgspec.json.Decoder(_BigLedger)


def decode(data: str | bytes) -> Ledger | None:
    """The ledger in `data` (JSON text or UTF-8 bytes), its attempts BigAttempt structs; None when msgspec
    refuses it (ledger.py then reads it and says what is wrong, or takes what msgspec is stricter about)."""
    try:
        big = _decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return Ledger(big.goal, big.attempts)  # type: ignore[arg-type]  # the structs read as Attempts
