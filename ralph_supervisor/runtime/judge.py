"""Agent calls judged: a call begun, a call's report built and judged, a verify's verdicts.

The call watcher (`evidence/calls.py`) knows when calls start and end; this part is what it calls (its
`CallHooks`): at a start the breaker learns of the call (the trial, the caps); at an end the call's output is
read by its agent's adapter, the workspace's delta and the cgroup's OOM kills are added, and the report is
judged: the snapshot keeper's destructive verdict first, then the breaker, then the waits (a usage limit,
the usage ceiling, an outage). A verify's verdicts come later, from its own thread, and may open the
breaker, never undo an open.

    >>> judge.hooks(marks=tap.marks)      # doctest: +SKIP  (what CallWatcher takes)
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from ralph_supervisor import events
from ralph_supervisor.breaker import Breaker, Decision
from ralph_supervisor.evidence.calls import CallHooks
from ralph_supervisor.evidence.errors import error_set
from ralph_supervisor.evidence.fingerprint import Returns
from ralph_supervisor.evidence.iterations import CallEvidence, build_report
from ralph_supervisor.evidence.workspace import WorkspaceDelta
from ralph_supervisor.files import ledger_json
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.limit_wait import LimitWait, Wait
from ralph_supervisor.memory import release_free_memory
from ralph_supervisor.records import Records, Warnings
from ralph_supervisor.report.sources import iteration_fields
from ralph_supervisor.runtime.lifecycle import Lifecycle
from ralph_supervisor.verify.judgement import Judged
from ralph_supervisor.verify.runner import VerifyRun

log = structlog.get_logger("ralph_supervisor")

RECENT_REPORTS = 20
"""Reports kept for `escalation.md`'s evidence."""
TRIM_EVERY = 100
"""Iterations between two returns of freed memory to the system."""


class CallJudge:
    """Judges each agent call as it begins and ends. Event loop only (`verified_threadsafe` hands a verify's
    verdicts over from its thread)."""

    def __init__(self, settings: Any, *, loop: asyncio.AbstractEventLoop, breaker: Breaker, records: Records,
                 warnings: Warnings, keeper: Any, verify: Any, cgroup: Any, silence: Any, metrics: Any,
                 tailer: Any, tap: Any, analysis: Any, loop_waits: Any, lifecycle: Lifecycle,
                 apply: Callable[[Decision], Awaitable[None]], apply_soon: Callable[[Decision], None],
                 begin_wait: Callable[[Wait, int], Awaitable[None]], waiting: Callable[[], bool],
                 save: Callable[..., None], tell_systemd: Callable[[], None]) -> None:
        self._settings = settings
        self._loop = loop
        self._breaker = breaker
        self._records = records
        self._warnings = warnings
        self._keeper = keeper
        self._verify = verify
        self._cgroup = cgroup
        self._silence = silence
        self._metrics = metrics
        self._tailer = tailer
        self._tap = tap
        self._analysis = analysis
        self._loop_waits = loop_waits
        self._life = lifecycle
        self._apply = apply
        self._apply_soon = apply_soon
        self._begin_wait = begin_wait
        self._waiting = waiting
        self._save = save
        self._tell_systemd = tell_systemd
        self.reports: deque[IterationReport] = deque(maxlen=RECENT_REPORTS)
        self._returns = Returns()
        """The state the workspace ended each iteration in: a return to one is not progress."""
        self._limits = LimitWait(settings.limit_wait_margin)
        self._oom_kills = 0

    def hooks(self, marks: Callable[[], dict[str, int]]) -> CallHooks:
        """What the call watcher calls around each call."""
        return CallHooks(started=self.started, build=self.build, report=self.observe,
                         settle_output=self.settle_output, marks=marks, timed_sources=lambda: self._tailer.following)

    # ------------------------------------------------------------------ a call's start and end

    def started(self, call: CallEvidence, now: float) -> None:
        """A call began: its silence counts from here; the breaker learns of it (the trial, the caps)."""
        self._keeper.iteration_started(call.number)
        self._oom_kills = self._cgroup.oom_kills() if self._cgroup is not None else 0
        self._silence.restart(now)
        log.info(events.ITERATION_STARTED, iteration=call.number, pid=call.pid, name=call.name or None)
        self._metrics.iteration_started(now=now)
        self._tell_systemd()
        decision = self._breaker.iteration_started(call.number, now)
        self._save()
        if decision.changed:
            self._apply_soon(decision)

    async def settle_output(self) -> None:
        """Everything the pipes and tailed files hold now, analysed (a call just ended)."""
        self._tailer.poll()  # the call's last words in its log file still belong to it
        self._tap.read_now()
        seq = self._tap.last_seq
        if self._analysis.analysed(seq):  # mostly it is: no thread to wait on, only its findings to take
            await asyncio.sleep(0)  # they were handed to the loop before it said so: they run before we go on
        else:
            await asyncio.to_thread(self._analysis.wait_done, seq, 5.0)

    def build(self, call: CallEvidence, ended: float, delta: WorkspaceDelta, *, exit_status: int | None = None,
              killed_by: int | None = None, timed_out: bool = False) -> IterationReport:
        """A finished call's report: its output read by the adapter of the agent that made it (or --agent's)."""
        from ralph_supervisor.agents import output_warnings, read_call

        self._keeper.iteration_ended(call.number, events_lost=delta.events_lost, net=delta)
        agent = None
        if call.text:
            agent = read_call(call.output_text(), name=call.name, argv=call.argv, agent=self._settings.agent,
                              now=ended)
            call.error_lines.extend(line for line in agent.error_lines if line not in call.error_lines)
            agent = self._loop_waits.read_usage(call.number, agent, ended)  # Codex: from its session file
            for key, event, fields in output_warnings(agent):
                self._warnings.once(key, event_name=event, iteration=call.number, **fields)
        returned_to = self._returns.record(call.number, delta.fingerprint)
        report = build_report(call, ended_at=ended, files_changed=delta.files_changed, changed_paths=delta.paths,
                              commits=delta.commits, agent=agent, signatures=error_set(call.error_lines),
                              returned_to=returned_to, exit_status=exit_status, killed_by=killed_by,
                              timed_out=timed_out)
        return self._oom_hit(report)

    async def observe(self, report: IterationReport, now: float) -> None:
        """A finished iteration: log it, keep it, judge it."""
        self.reports.append(report)
        tokens = report.tokens or 0
        self._say_what_cannot_be_judged(report)
        spend = self._records.spend(tokens, report.cost_usd or 0.0, now)
        log.info(events.ITERATION_FINISHED, iteration=report.number, files_changed=report.files_changed,
                 commits=report.commits, output_bytes=report.output_bytes, errors=len(report.error_signatures),
                 tokens=tokens, outcome=ledger_json.outcome_of(report), failed=report.failed,
                 usage_limited=report.usage_limited, blocked=report.blocked, cut_short=report.cut_short,
                 cost_usd=report.cost_usd, returned_to=report.returned_to, agent=report.agent or None,
                 exit_status=report.exit_status, killed_by=report.killed_by, timed_out=report.timed_out,
                 paths=list(report.changed_paths[:5]), duration_s=round(report.ended_at - report.started_at, 3),
                 **iteration_fields(report))
        metrics = self._metrics
        metrics.iteration_finished(files_changed=report.files_changed, output_bytes=0, tokens=tokens)
        metrics.add_cost(report.cost_usd or 0.0)
        metrics.daily_spend(tokens=spend.tokens, cost_usd=spend.cost_usd)
        self._records.attempt(report)
        if self._verify is not None:
            self._verify.observed(report)
        if report.number % TRIM_EVERY == 0:
            release_free_memory()
        destroyed = await asyncio.to_thread(self._keeper.verdict, report.number)  # first: it precedes the rest
        if destroyed is not None:
            self.destroying(destroyed, report.number)
        decision = self._breaker.observe(report, now, daily_tokens_today=spend.tokens,
                                         daily_cost_today=spend.cost_usd)
        if decision.changed:
            await self._apply(decision)
        else:
            self._save(paced=True)  # the counters: written now, or with the next call's start (records.py)
        wait = self._limits.observe(limited=report.usage_limited, resets_at=report.limit_resets_at, now=now)
        if wait is not None and self._settings.limit_wait == "off":
            self._warnings.once("limit_wait_off", event_name="limit_wait_skipped", iteration=report.number,
                                detail="a usage limit: --limit-wait off leaves the wait to the loop (counted toward no rule)")
        elif wait is not None:
            await self._begin_wait(wait, report.number)
        wait = self._loop_waits.call_ended(report, now)  # the usage ceiling, an outage
        if wait is not None and not self._waiting():
            await self._begin_wait(wait, report.number)

    def _say_what_cannot_be_judged(self, report: IterationReport) -> None:
        """A budget on something the call's agent does not report is said once, never guessed."""
        agent = report.agent or "this agent"
        settings = self._settings
        if report.cost_usd is None and (settings.cost_budget or settings.daily_cost_budget):
            self._warnings.once(f"cost_unknown:{agent}", event_name="cost_unknown", agent=agent,
                                detail=f"{agent} reports no cost: its calls add nothing to the dollar budgets")
        if report.tokens is None and (settings.token_budget or settings.daily_token_budget):
            self._warnings.once(f"tokens_unknown:{agent}", event_name="tokens_unknown", agent=agent,
                                detail=f"{agent} reports no tokens: its calls add nothing to the token budgets")

    def _oom_hit(self, report: IterationReport) -> IterationReport:
        """An OOM kill inside the loop's cgroup during the call: an event, and the call failed for that reason."""
        kills = self._cgroup.oom_kills() if self._cgroup is not None else 0
        if kills <= self._oom_kills:
            return report
        killed, self._oom_kills = kills - self._oom_kills, kills
        memory_max = self._settings.memory_max
        said = (f"Error: killed by the OOM killer ({killed} process{'es' if killed > 1 else ''}): the loop's cgroup "
                f"reached --memory-max {memory_max or '(its bound)'} bytes")
        log.warning(events.CGROUP_OOM, iteration=report.number, kills=killed, memory_max=memory_max)
        return dataclasses.replace(report, failed=True, outage=False, usage_limited=False, reply=None,
                                   error_lines=(said, *report.error_lines)[:20],
                                   error_signatures=report.error_signatures | error_set([said]))

    # ------------------------------------------------------------------ verdicts that come later

    def destroying(self, reason: str, iteration: int | None = None) -> None:
        """An iteration destroyed the workspace (the keeper's verdict, or the user's `.git` gone between
        calls): open now."""
        if self._life.exiting:
            return
        decision = self._breaker.destructive_open(reason, time.time(), iteration)
        if decision.changed:
            self._apply_soon(decision)

    def verified_threadsafe(self, judged: Judged, run: VerifyRun) -> None:
        """The verify's thread: hand its verdicts to the event loop."""
        try:
            self._loop.call_soon_threadsafe(self._verified, judged, run)
        except RuntimeError:  # the loop is closed: we are leaving
            pass

    def _verified(self, judged: Judged, run: VerifyRun) -> None:
        """A verify's verdicts, after its iteration was judged: they may open, never undo an open."""
        r = run.results if run.verified else None
        self._metrics.verified(seconds=run.seconds, counts=None if r is None else {
            "passed": r.passed, "failed": r.failed, "errors": r.errors, "skipped": r.skipped})
        if judged.progress:
            self._breaker.verified_progress()
        tripping = [v for v in judged.verdicts if v.trip]
        if tripping and not self._life.exiting:
            if tripping[0].trigger == "tampering" and run.previous_snapshot is not None:
                self._keeper.hold("tampering", run.previous_snapshot)  # the escalation names the tests before
            decision = self._breaker.verdict_open(tripping[0].trigger, tripping[0].reason, time.time())
            if decision.changed:
                self._apply_soon(decision)
