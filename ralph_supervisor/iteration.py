"""The values that flow from the evidence to the breaker.

This module is a leaf: it imports nothing of the project, so the breaker (pure) and the
evidence sources (I/O) can both speak in these terms without depending on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class IterationReport:
    """Everything the breaker is told about one finished iteration (one agent call).

    `number` is 1-based. Times are seconds on the supervisor's monotonic-ish clock
    (whatever clock the supervisor injects; the breaker never reads one itself).
    """

    number: int
    started_at: float
    ended_at: float
    files_changed: int = 0
    """Paths whose content or existence changed during the iteration (ignored paths excluded)."""
    changed_paths: tuple[str, ...] = ()
    """A bounded sample of those paths, relative to the workspace, for the escalation summary."""
    commits: int = 0
    """New commits or moved branches seen during the iteration."""
    output_bytes: int = 0
    """Bytes the call printed (pipes and tailed files)."""
    error_signatures: frozenset[str] = frozenset()
    """The iteration's error set: normalised signatures of the lines the filter proved are errors."""
    error_lines: tuple[str, ...] = ()
    """A bounded sample of the raw error lines, first seen first."""
    reply: str | None = None
    """The agent's reply text (RALPH_STATUS block removed); None when the call gave no reply."""
    tokens: int | None = 0
    """Tokens the agent reported for this call (input + output); None when its agent reports none."""
    cost_usd: float | None = None
    """Dollars the agent reported for this call; None when its agent reports no cost."""
    agent: str = ""
    """The adapter that read the call's output (claude, codex, gemini, ..., text)."""
    exit_status: int | None = None
    """The call's exit code when the supervisor could know it; else None."""
    killed_by: int | None = None
    """The signal that ended the call, when the supervisor could see it (a timeout's SIGTERM, say)."""
    failed: bool = False
    """The call produced no successful result, or was cut off by a timeout."""
    timed_out: bool = False
    usage_limited: bool = False
    """The output says a usage or rate limit will reset: neutral for every rule."""
    limit_resets_at: float | None = None
    """When a usage limit resets (epoch seconds), when the output said so."""
    returned_to: int | None = None
    """The workspace ended this call in the state it had after that iteration (0: the run's start):
    a return to an earlier state, not progress."""
    blocked: bool = False
    """An error only a human can clear (credentials, policy, billing)."""
    blocked_reason: str = ""
    completed: bool = False
    """The agent said it is done (EXIT_SIGNAL: true)."""
    status: dict[str, str] = field(default_factory=dict)
    """The RALPH_STATUS block's fields, when the reply had one."""
    session_id: str = ""
    cut_short: bool = False
    """The iteration was interrupted by the supervisor itself (a pause or a stop); never a trial."""

    outage: bool = False
    """The agent said it cannot reach its API and the call did not succeed: neutral for every rule (`outage.py`)."""
    outage_message: str = ""
    """Its last retry report or error saying so."""

    states_blocker: bool = False
    """The reply says the agent is blocked (`STATUS: BLOCKED`, or a blocker in its words: see `residual.py`)."""

    @property
    def progress(self) -> bool:
        """Progress is evidence in the workspace: a new commit, or files changed into a state not seen before
        in this run (returning to an earlier state, an undo or a flip-flop, is not progress)."""
        return self.commits > 0 or (self.files_changed > 0 and self.returned_to is None)

    @property
    def first_error(self) -> str:
        return self.error_lines[0] if self.error_lines else ""
