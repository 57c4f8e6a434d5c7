"""The waits the loop cannot avoid, seen from the supervisor: the usage ceiling and API outages.

The supervisor freezes the tree for both exactly as for a usage limit (`runtime/wait_episode.py`); this
part decides when, and says what it sees: the `usage_high`, `usage_ceiling`, `outage_started` and
`outage_ended` events, one notice at each end of an outage, the metrics, and the live fields of `status`.
The rules themselves are pure (`usage_headroom.py`, `outage.py`); the agents' formats are read in
`agents/usage.py` and `agents/outages.py`.

    waits = LoopWaits(settings, warnings, lambda: metrics, notifier)
    agent = waits.read_usage(call.number, agent, ended)   # a call's output was read (Codex: its session file)
    wait = waits.call_ended(report, now)                  # a ceiling freeze to begin, if any
    waits.output(text, iteration, now)                    # live: the agent's own retry reports
    due = waits.due(now)                                  # each tick: an outage's back-off, or Final
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import structlog

from ralph_supervisor import events, store
from ralph_supervisor.agents.outages import scan_lines
from ralph_supervisor.agents.usage import UsageReport, codex_home, codex_session_windows
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.limit_wait import Wait
from ralph_supervisor.notify import notice_for_outage
from ralph_supervisor.outage import Final, Outage
from ralph_supervisor.usage_headroom import SHOW_AT, UsageHeadroom

log = structlog.get_logger("ralph_supervisor")

KEPT_REPORTS = 8
"""Usage reports kept between a call's reading and its judging (they follow each other at once)."""


class LoopWaits:
    def __init__(self, settings: Any, warnings: Any, metrics: Callable[[], Any], notifier: Any) -> None:
        self.settings = settings
        self.warnings = warnings
        self._metrics = metrics
        self.notifier = notifier
        self.headroom = UsageHeadroom(ceiling=settings.usage_ceiling, no_overage=settings.no_overage,
                                      margin_s=settings.limit_wait_margin)
        self.outage = Outage(settings.outage_max * 60.0)
        self._usage: dict[int, UsageReport] = {}
        self._shown: dict[str, float | None] = {}

    # ------------------------------------------------------------------ a call's end

    def read_usage(self, number: int, agent: Any, now: float) -> Any:
        """Keep the call's usage report; a Codex call that printed none is looked up in its session file
        (`$CODEX_HOME/sessions/.../rollout-*-<thread_id>.jsonl`). Returns the agent output, with it."""
        usage = getattr(agent, "usage", None)
        if not isinstance(usage, UsageReport):
            return agent
        if not usage.windows and getattr(agent, "agent", "") == "codex" and agent.session_id:
            found = codex_session_windows(codex_home(), agent.session_id, now)
            if found.reported or found.problems:
                usage = found
                agent = dataclasses.replace(agent, usage=usage)
        self._usage[number] = usage
        while len(self._usage) > KEPT_REPORTS:
            del self._usage[min(self._usage)]
        return agent

    def call_ended(self, report: IterationReport, now: float) -> Wait | None:
        """Judge a finished call: the outage it shows or ends, its usage windows. The ceiling freeze to begin
        now, if any (the call has finished: a freeze never cuts one short)."""
        if report.outage:
            self._retry(report.outage_message or "the API is unreachable", report.number, now)
        elif not report.cut_short:
            self._reached(report.number, now, "a call reached the API")
        usage = self._usage.pop(report.number, None)
        if usage is None or report.cut_short:
            return None
        for problem in usage.problems:
            self.warnings.once(f"usage_unreadable:{problem}", event_name="usage_report_unreadable",
                               iteration=report.number, detail=f"{report.agent or 'the agent'}: {problem} (ignored)")
        if not usage.reported:
            if self.headroom.on and not report.outage:
                agent = report.agent or "this agent"
                self.warnings.once(f"usage_unreported:{agent}", event_name="usage_unreported", agent=agent,
                                   detail=f"{agent} reports no usage windows: --usage-ceiling and --no-overage "
                                          f"cannot judge its calls (its usage limits are still waited out)")
            return None
        self._say_usage(usage, report.number, now)
        wait = self.headroom.observe(usage, now)
        if wait is None or report.usage_limited:
            return None  # a usage limit is waited out already, for its own reset
        hit = self.headroom.hit
        log.info("usage_ceiling", iteration=report.number, window=hit.window if hit else None,
                 utilization=hit.utilization if hit else None,
                 resets_at=None if hit is None or hit.resets_at is None else store.iso_utc(hit.resets_at),
                 overage=usage.overage, reason=wait.reason)
        return wait

    def _say_usage(self, usage: UsageReport, number: int, now: float) -> None:
        metrics = self._metrics()
        for window in usage.windows:
            if window.utilization is not None:
                metrics.usage_window(window.name, window.utilization)
        high = [w for w in usage.windows if w.utilization is not None and w.utilization >= SHOW_AT]
        said = {w.name: w.utilization for w in high}
        if high and any(self._shown.get(name) != figure for name, figure in said.items()):
            log.info(events.USAGE_HIGH, iteration=number, windows=[w.to_dict() for w in high], source=usage.source)
        self._shown = said

    # ------------------------------------------------------------------ outages

    def output(self, text: str, iteration: int, now: float) -> None:
        """Live: a chunk of the loop's output; the agent's own retry reports start (or go on with) an outage,
        an answer from the API after them ends it."""
        said, reached = scan_lines(text, in_outage=self.outage.on)
        if said is not None:
            self._retry(said, iteration, now)
        elif reached and self.outage.on:
            self._reached(iteration, now, "the API answered")

    def _retry(self, message: str, iteration: int, now: float) -> None:
        if self.outage.retry(message, now):
            since = self.outage.since or now
            log.info(events.OUTAGE_STARTED, since=store.iso_utc(since), message=message, iteration=iteration)
            self._metrics().outage(since)
            self.notifier.send(notice_for_outage(started=True, since=since, message=message,
                                                 workspace=str(self.settings.workspace), iteration=iteration))

    def _reached(self, iteration: int, now: float, why: str) -> None:
        message = self.outage.message
        since = self.outage.reached()
        if since is None:
            return
        log.info(events.OUTAGE_ENDED, since=store.iso_utc(since), seconds=round(now - since, 1), why=why,
                 iteration=iteration)
        self._metrics().outage(None)
        self.notifier.send(notice_for_outage(started=False, since=since, message=message, now=now,
                                             workspace=str(self.settings.workspace), iteration=iteration))

    def due(self, now: float) -> Wait | Final | None:
        """Each tick, while the tree is not frozen: an outage longer than --outage-max calls for a back-off
        freeze (or, after three, the final open)."""
        return self.outage.due(now)

    # ------------------------------------------------------------------ what status shows

    def status(self, now: float, *, frozen_for: str | None) -> dict[str, Any]:
        """The live fields of `status`; `frozen_for`: the kind of the freeze in progress (`Wait.kind`), if any."""
        since = self.outage.since
        return {
            "outage_since": None if since is None else store.iso_utc(since),
            "outage_message": self.outage.message or None,
            "wait_kind": frozen_for,
            "usage": [w.to_dict() for w in self.headroom.shown(now)],
        }
