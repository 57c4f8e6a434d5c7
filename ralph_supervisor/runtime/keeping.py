"""`state.json` written from the breaker, and the files of ours that must stay whole while we run.

A file of the state folder deleted or replaced under us (`rm -rf` of the wrong folder, an agent that "cleans
up") is noticed within a tick (`state_guard.py`), written again from what the supervisor holds and reported
once; a lost control socket is bound again.

    >>> keeping = Keeping(settings, breaker=breaker, records=records, warnings=warnings,
    ...                   limit_until=lambda: None, escalation_text=lambda: None)   # doctest: +SKIP
    >>> keeping.save()                                                            # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import structlog

from ralph_supervisor import events, state_folder
from ralph_supervisor.breaker import Breaker
from ralph_supervisor.breaker.snapshot import Snapshot
from ralph_supervisor.control import ControlError
from ralph_supervisor.files import escalation_md, ledger_json, state_json
from ralph_supervisor.records import Records, Warnings
from ralph_supervisor.settings import thresholds_from
from ralph_supervisor.state_guard import StateGuard
from ralph_supervisor.store import atomic_write_text

log = structlog.get_logger("ralph_supervisor")


def load_breaker(settings: Any) -> tuple[Breaker, str | None]:
    """The breaker as `state.json` left it; a corrupt file is moved aside and we start CLOSED (the warning says so)."""
    thresholds = thresholds_from(settings)
    snapshot, warning = state_json.load(settings.state_dir, move_bad=True)
    if snapshot is None:
        return Breaker(thresholds), f"{warning}; starting CLOSED" if warning else None
    # --token-budget and --cost-budget are per run; the daily budgets are what spans runs.
    return Breaker(thresholds, dataclasses.replace(snapshot, tokens_used=0, cost_used=0.0)), None


class Keeping:
    """Keeps `state.json` current and the state folder's files whole. Event loop only."""

    def __init__(self, settings: Any, *, breaker: Breaker, records: Records, warnings: Warnings,
                 limit_until: Callable[[], float | None], escalation_text: Callable[[], str | None]) -> None:
        self._settings = settings
        self._breaker = breaker
        self._records = records
        self._warnings = warnings
        self._limit_until = limit_until
        self._escalation_text = escalation_text
        self.guard: StateGuard | None = None
        self.control: Any = None
        """The control server, bound again when its socket is lost (None: there is none)."""
        self.published: Snapshot = breaker.snapshot()
        """The breaker as last saved: an immutable value, read by other threads (the metrics' scrapes)."""

    def save(self, *, paced: bool = False) -> None:
        """`state.json` from the breaker, with the end of a wait the tree is frozen for; `paced` (only the
        counters moved, at a call's end): now or soon (records.py)."""
        self.published = snapshot = self._breaker.snapshot()
        self._records.save(snapshot, limit_until=self._limit_until(), paced=paced)

    def guard_files(self) -> None:
        """From now on, a file of ours that goes is written again (after the first save)."""
        self.guard = StateGuard(self._settings.state_dir, self._write_again)

    async def keep_whole(self) -> None:
        """A deleted or replaced file of ours is noticed within a tick, recreated and reported once."""
        if self.guard is None:
            return
        for name in self.guard.check():
            log.warning("state_file_lost", file=name, hint="recreated; what is written from now on is kept")
        if self.control is not None and self.control.lost():
            log.warning("state_file_lost", file="control.sock", hint="listening on a new socket")
            try:
                await self.control.rebind()
            except (OSError, ControlError) as exc:
                log.warning(events.CONTROL_SOCKET_UNAVAILABLE, error=str(exc))

    def close(self) -> None:
        if self.guard is not None:
            self.guard.close()

    def _write_again(self, name: str) -> None:
        """Write a lost file again from what the supervisor holds."""
        state_dir = self._settings.state_dir
        if name == state_json.NAME:
            self.save()
        elif name == ledger_json.NAME:
            ledger = self._records.ledger
            try:
                atomic_write_text(ledger_json.path(state_dir), ledger_json.dump_ledger(ledger.goal, ledger.attempts))
            except OSError as exc:
                self._warnings.once("ledger_unwritable", error=str(exc))
        elif name == escalation_md.NAME:
            text = self._escalation_text()
            if text is not None:
                self._records.escalation(text)
        elif name == state_folder.ORIGIN_FILE:
            state_folder.write_origin(self._settings.workspace, state_dir)
