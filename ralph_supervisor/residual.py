"""What is left when a loop stops: work the agent may still fix, or a blocker only a human can clear.

goal-circuit-breaker's point: accounting for a blocker is progress, re-describing it is not. This leaf
module holds the two classifications both the breaker (a restated blocker trips `paraphrase` whatever the
files do) and the escalation summary (stating the residual once) rely on.

    >>> states_blocker("I am still blocked on the missing database migration for the users table", {})
    True
    >>> states_blocker("Done, all tests pass.", {"STATUS": "COMPLETE"})
    False
"""

from __future__ import annotations

import re
from collections.abc import Mapping

HUMAN_NEEDED = re.compile(
    r"invalid api key|api[ _-]?key|/login|please (?:run|log ?in)|not logged in|unauthori[sz]ed|authenticat"
    r"|credential|\b401\b|\b403\b|forbidden|permission denied|not permitted|access denied|credit balance"
    r"|billing|payment required|\bquota\b|subscription|secret|token (?:is )?(?:missing|expired|invalid)"
    r"|approval|approve|sign[- ]?off|needs? (?:a )?(?:human|decision|review)|waiting (?:for|on)"
    r"|blocked on|blocked by|please decide|(?:a|your|human) decision",
    re.IGNORECASE,
)
"""Words in an error line that say only a person can clear it."""

CODE_ERROR = re.compile(
    r"error TS\d+|SyntaxError|TypeError|NameError|ImportError|ModuleNotFoundError|AttributeError"
    r"|ReferenceError|compil|undefined reference|cannot find (?:module|symbol)|\bFAILED\b|tests? failed"
    r"|failing tests?|AssertionError|assert|Traceback|Exception|panicked|segmentation fault|lint"
    r"|build failed|\berror\[E\d+\]",
    re.IGNORECASE,
)
"""Words that say the residual is code the agent may fix with another attempt."""

BLOCKER_STATEMENT = re.compile(
    r"(?<!no longer )(?<!not )(?<!un)\bblocked\b|\bblocker\b"
    r"|\b(?:cannot|can't|can not|unable to) (?:proceed|continue|go ahead)"
    r"|\bwaiting (?:for|on) (?:a |the |your )?(?:human|approval|review|decision|credentials?|access|permission|sign[- ]?off)"
    r"|\bneeds? (?:a |your |human )?(?:human|decision|approval|sign[- ]?off|credentials?|access|permission)"
    r"|\brequires? (?:a |your )?(?:human|manual|decision|approval|credentials?|access|permission)"
    r"|\bmissing (?:credentials?|api key|secret|access|permission)|not logged in|please (?:run|log ?in|decide|approve)",
    re.IGNORECASE,
)
"""A reply that says the agent cannot go on without someone else (stricter than HUMAN_NEEDED, which also
matches work *about* authentication or billing)."""


def states_blocker(reply: str | None, status: Mapping[str, str]) -> bool:
    """The reply says it is blocked: `STATUS: BLOCKED` in its status block, or a blocker stated in its text."""
    fields = {str(key).upper(): str(value).strip().upper() for key, value in status.items()}
    if fields.get("STATUS") == "BLOCKED":
        return True
    return bool(reply) and BLOCKER_STATEMENT.search(reply) is not None  # type: ignore[arg-type]


def needs_a_human(line: str) -> bool:
    """An error line that only a person can clear (not a code error that mentions, say, a token)."""
    return HUMAN_NEEDED.search(line) is not None and CODE_ERROR.search(line) is None
