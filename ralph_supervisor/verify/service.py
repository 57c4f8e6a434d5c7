"""The supervisor's side of the verify: which snapshots are verified, and what reaches the breaker.

The supervisor makes a few calls (`snapshot_taken` from the keeper, `observed` for every iteration
report, `status`, `finish` when the child exits, `close`); the verdicts come back on `deliver`, which
the supervisor hands to its event loop. A snapshot is verified when it is the run's first (the baseline
the first iteration is compared with) or an iteration's that changed files.

    service = VerifyService.create(settings, keeper.store, deliver=lambda judged, run: ...)
    service.start(); keeper's on_snapshot=service.snapshot_taken; service.observed(report)
    code = service.finish(code)   # the child exited: wait for pending verifies; 2 on false-completion
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog

from ralph_supervisor import events
from ralph_supervisor.files import verify_jsonl
from ralph_supervisor.snapshots.info import SnapshotInfo, restore_command
from ralph_supervisor.snapshots.store import SnapshotStore
from ralph_supervisor.verify.judgement import FALSE_COMPLETION, Judged, VerifyJudge, says_done
from ralph_supervisor.verify.runner import Verifier, VerifyPlan, VerifyRun

log = structlog.get_logger(__name__)

CLAIMS_MAX = 1000
EXIT_FALSE_COMPLETION = 2


class VerifyService:
    def __init__(self, settings: Any, store: SnapshotStore, deliver: Callable[[Judged, VerifyRun], None]) -> None:
        self.settings = settings
        self._deliver = deliver
        self._claims: OrderedDict[int, bool] = OrderedDict()
        self._lock = threading.Lock()
        self.false_completion = False
        self.judge = VerifyJudge(regression=settings.regression, tampering=settings.tampering,
                                 false_completion=settings.false_completion == "on",
                                 no_verified_progress=settings.no_verified_progress,
                                 restore_command=lambda iteration: restore_command(iteration, settings.workspace))
        self.verifier = Verifier(VerifyPlan.of(settings), store, on_finished=self._finished,
                                 rerun_broken=settings.regression > 0)

    @classmethod
    def create(cls, settings: Any, store: SnapshotStore | None,
               deliver: Callable[[Judged, VerifyRun], None]) -> VerifyService | None:
        if not settings.verify:
            return None
        if store is None:
            log.warning("verify_off", reason="the verify runs on the snapshots, and they are off",
                        hint="install git and keep --snapshot-budget above 0")
            return None
        return cls(settings, store, deliver)

    def start(self) -> None:
        source = self.settings.sources.get("verify", "")
        log.info("verify_command", command=self.settings.verify, source=source)
        self.verifier.start()

    def snapshot_taken(self, info: SnapshotInfo) -> None:
        """From the keeper's thread: verify the first snapshot and every iteration's that changed files."""
        changed = info.added or info.modified or info.deleted
        if info.kind == "start" or (info.kind == "iteration" and changed):
            self.verifier.submit(info)

    def observed(self, report: Any) -> None:
        """An iteration's report: remember whether the agent said it was done (its verify comes later)."""
        with self._lock:
            status = getattr(report, "status", None) or {}
            done = bool(report.completed) or str(status.get("STATUS", "")).upper() == "COMPLETE"
            self._claims[report.number] = says_done(done, report.reply)
            while len(self._claims) > CLAIMS_MAX:
                self._claims.popitem(last=False)

    def _finished(self, run: VerifyRun) -> None:
        """On the verify's thread: judge the run and hand the verdicts over."""
        with self._lock:
            claimed = self._claims.get(run.iteration, False)
        judged = self.judge.judge(run, claimed)
        if any(v.trigger == FALSE_COMPLETION for v in judged.verdicts):
            self.false_completion = True
        for verdict in judged.verdicts:
            log.warning("verify_verdict", iteration=run.iteration, trigger=verdict.trigger, trip=verdict.trip,
                        reason=verdict.reason)
        self._deliver(judged, run)

    def status(self) -> dict[str, Any] | None:
        """The `verify` part of `status --json`: the last verify."""
        run = self.verifier.last
        return verify_jsonl.status_of(run.line() if run else None, running=self.verifier.busy())

    def finish(self, code: int, keeper_idle: Callable[[float], bool]) -> int:
        """The child exited: wait (at most --verify-timeout) for its last snapshot and the verifies pending."""
        timeout = self.settings.verify_timeout
        began = time.monotonic()
        keeper_idle(min(60.0, timeout))
        if not self.verifier.idle(max(0.0, timeout - (time.monotonic() - began))):
            log.warning(events.VERIFY_UNFINISHED, hint=f"pending verifies took longer than {timeout:g} s")
        return EXIT_FALSE_COMPLETION if self.false_completion else code

    def close(self) -> None:
        self.verifier.close(0.0)
