"""A decision carried out, whoever made it: the breaker, the tick, a verify's verdict or a control request.

In one order: the history line, then `state.json` (whoever sees the new state finds its transition already
written), then the tree (`decisions.plan_for` says what), then what follows an open (`escalation.md`, the
hook, the notices, `report.html`). Every tree action runs under `TreeActions.lock`, so a resume can never
interleave with a pause.

    >>> await applier.apply(breaker.observe(report, now))                 # doctest: +SKIP
    >>> async with actions.lock:                                          # doctest: +SKIP
    ...     await applier.apply_locked(decision, plan_for_request("pause"), record=True)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from ralph_supervisor import events, store
from ralph_supervisor.breaker import Breaker, Decision, State
from ralph_supervisor.decisions import EXIT_FOR_GOOD, EXIT_STOP_REQUEST, Plan, plan_for
from ralph_supervisor.escalation import render_escalation
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.notify import notice_for_transition
from ralph_supervisor.records import Records, Warnings
from ralph_supervisor.runtime.child import Child
from ralph_supervisor.runtime.lifecycle import Lifecycle
from ralph_supervisor.spend import spend_lines
from ralph_supervisor.tasks import Background

log = structlog.get_logger("ralph_supervisor")

ESCALATION_HISTORY = 20
"""History lines `escalation.md` shows of what came before the open."""


class Applier:
    """Carries decisions out on the tree and on the record. Event loop only."""

    def __init__(self, settings: Any, *, breaker: Breaker, actions: Any, child: Child, cgroup: Any,
                 records: Records, warnings: Warnings, keeper: Any, hooks: Any, notifier: Any, metrics: Any,
                 report_writer: Any, silence: Any, lifecycle: Lifecycle, background: Background,
                 iteration: Callable[[], int], recent_reports: Callable[[], Sequence[IterationReport]],
                 save: Callable[[], None], tell_systemd: Callable[[], None]) -> None:
        self._settings = settings
        self._breaker = breaker
        self._actions = actions
        self._child = child
        self._cgroup = cgroup
        self._records = records
        self._warnings = warnings
        self._keeper = keeper
        self._hooks = hooks
        self._notifier = notifier
        self._metrics = metrics
        self._report_writer = report_writer
        self._silence = silence
        self._life = lifecycle
        self._background = background
        self._iteration = iteration
        self._recent_reports = recent_reports
        self._save = save
        self._tell_systemd = tell_systemd
        self.escalation_text: str | None = None
        """The last `escalation.md` written, to write again if the file is lost."""

    async def apply(self, decision: Decision, plan: Plan | None = None) -> None:
        """Carry out a decision. `plan` overrides what it asks of the tree (a control request); without one it
        follows from the decision and `--on-open`."""
        async with self._actions.lock:
            await self.apply_locked(decision, plan)

    def apply_soon(self, decision: Decision) -> None:
        """`apply` as a background task (from a callback that cannot wait)."""
        self._background.spawn(self.apply(decision))

    async def apply_locked(self, decision: Decision, plan: Plan | None, *, record: bool = False) -> None:
        """`apply` with `TreeActions.lock` held. `record`: write the history line even when the state did not
        change (a `pause` of a breaker already OPEN: the trigger becomes `manual`)."""
        if decision.changed or record:
            self._record_transition(decision)
        self._save()
        plan = plan_for(decision, on_open=self._settings.on_open) if plan is None else plan
        opened = decision.action in ("open", "final")
        if opened and decision.trigger != "manual":
            self._keeper.opened(decision.trigger)
            self._write_escalation(decision)
        if plan is Plan.PAUSE:
            if not self._actions.paused:
                await self._actions.pause(self._iteration())
        elif plan is Plan.STOP_AND_RESTART:
            self._child.restart_pending = True
            await self.stop_tree(events.STOP_BREAKER_OPEN)
        elif plan is Plan.STOP_FOR_GOOD:
            await self.stop_tree(events.STOP_BREAKER_FINAL)
            self._life.finish(EXIT_FOR_GOOD)
        elif plan is Plan.TRIAL:
            await self._start_trial()
        elif plan is Plan.STOP_AND_EXIT:
            await self.stop_tree(events.STOP_REQUEST)
            self._life.finish(EXIT_STOP_REQUEST)
        if opened and decision.trigger != "manual" and self._hooks.command:
            # After the tree action, so the hook is never frozen or stopped with the tree.
            payload = json.dumps({**decision.to_dict(), "workspace": str(self._settings.workspace),
                                  "state_dir": str(self._settings.state_dir)})
            self._background.spawn(self._hooks.run(payload, decision.iteration))
        if opened:
            self._report_writer.request()

    async def stop_tree(self, why: str) -> None:
        """Stop the whole tree (see `TreeActions.stop`), end with the cgroup's kill, collect the child's exit."""
        await self._actions.stop(why, self._iteration())
        self.kill_cgroup(why)
        self._child.forget_if_gone()

    def kill_cgroup(self, why: str) -> None:
        """A stop ends with `cgroup.kill`: whatever the signals missed, however it left the tree."""
        if self._cgroup is not None:
            left = self._cgroup.kill()
            if left:
                log.warning("cgroup_killed", processes=left, reason=why, path=str(self._cgroup.path))
                self._child.collect_exits()

    async def _start_trial(self) -> None:
        """HALF_OPEN (or a resume, a reset): thaw the tree, or start the command again when it was stopped."""
        self._silence.restart(time.time())
        if self._actions.paused:
            await self._actions.resume(self._iteration())
        elif self._child.info is None and not self._life.exiting and not self._child.ended_by_itself:
            self._child.restart_pending = False
            self._child.spawn()

    def _record_transition(self, decision: Decision) -> None:
        self._records.transition(decision)
        if decision.state is State.OPEN:
            self._metrics.breaker_opened(decision.trigger)
        self._tell_systemd()
        notice = notice_for_transition(from_state=decision.from_state.value, to_state=decision.state.value,
                                       trigger=decision.trigger, reason=decision.reason,
                                       iteration=decision.iteration, workspace=str(self._settings.workspace),
                                       final=decision.final)
        if notice is not None:
            self._notifier.send(notice)

    def _write_escalation(self, decision: Decision) -> None:
        settings = self._settings
        history = self._records.history_tail(ESCALATION_HISTORY + 1)[:-1]  # before this open
        summary = {
            "workspace": str(settings.workspace),
            "command": " ".join(settings.command),
            "on_open": settings.on_open,
            "state_dir": str(settings.state_dir),
        }
        reports = list(self._recent_reports())
        snapshot, today = self._breaker.snapshot(), self._records.spend(0, 0.0, time.time())
        reported_cost = snapshot.cost_used > 0 or any(r.cost_usd is not None for r in reports)
        spend = spend_lines(tokens=snapshot.tokens_used, cost_usd=snapshot.cost_used if reported_cost else None,
                            token_budget=settings.token_budget, cost_budget=settings.cost_budget,
                            daily_tokens=today.tokens, daily_cost_usd=today.cost_usd,
                            daily_token_budget=settings.daily_token_budget,
                            daily_cost_budget=settings.daily_cost_budget)
        try:
            text = render_escalation(decision, reports, history, summary, store.iso_utc(),
                                     restore=self._keeper.restore_lines(decision.trigger), spend=spend)
        except Exception as exc:  # noqa: BLE001 - the summary is a courtesy; the stop is not
            self._warnings.once("escalation_unwritable", error=str(exc))
            return
        self._records.escalation(text)
        self.escalation_text = text
