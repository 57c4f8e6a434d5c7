"""The supervisor: the one place that wires the parts together.

One asyncio event loop reads the child's pipes (the tap), serves the control socket, handles signals and
runs a short tick that samples the tree, follows the agent's log files and asks the breaker what time
alone decides (cooldowns, stalls, trial bounds). Evidence flows up into `IterationReport`s; the breaker
(pure) answers with `Decision`s; `apply` carries each one out, in one order, whoever asked for it.

The parts, each with one job and its own module:

| part | module |
|---|---|
| reading the child's pipes, `child.log` | `evidence/tap.py` (`OutputTap`) |
| the analysis worker behind the tap | `evidence/analysis.py` (`OutputAnalysis`) |
| agent calls: which call is running, its evidence | `evidence/iterations.py` (`IterationTracker`) |
| file changes and commits per iteration | `evidence/workspace.py` (`Workspace`) |
| the stall rule's silence | `evidence/silence.py` (`SilenceMeter`) |
| pause, resume, stop, one at a time | `tree_actions.py` (`TreeActions`) |
| what a decision means for the tree | `decisions.py` (`plan_for`) |
| the files the supervisor keeps | `records.py` (`Records`), owners in `files/` |
| the on-open hook | `hooks.py` (`HookRunner`) |

    >>> code = run_supervisor(settings)   # lock the folder, sweep leftovers, supervise, return run's exit code
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor import events, status_json
from ralph_supervisor import files, store
from ralph_supervisor.breaker import Breaker, Decision, State
from ralph_supervisor.container import proc_mount_problem
from ralph_supervisor.control import ControlError, ControlServer, socket_path
from ralph_supervisor.countdown import countdown_for, waits_now
from ralph_supervisor.decisions import (
    EXIT_FOR_GOOD,
    EXIT_STOP_REQUEST,
    Plan,
    plan_for,
    plan_for_request,
)
from ralph_supervisor.escalation import render_escalation
from ralph_supervisor.evidence.analysis import OutputAnalysis
from ralph_supervisor.evidence.calls import CallHooks, CallWatcher
from ralph_supervisor.evidence.errors import error_set
from ralph_supervisor.evidence.fingerprint import Returns
from ralph_supervisor.evidence.iterations import (
    CallEvidence,
    IterationTracker,
    OutputResult,
    build_report,
)
from ralph_supervisor.evidence.silence import SilenceMeter
from ralph_supervisor.evidence.tail import Tailer
from ralph_supervisor.evidence.tap import Chunk, OutputTap
from ralph_supervisor.evidence.workspace import Change, Workspace, WorkspaceDelta
from ralph_supervisor.files import child_log, escalation_md, events_jsonl, ledger_json, state_json
from ralph_supervisor.files import lock as lock_file
from ralph_supervisor.files.lock import AlreadyRunning, InstanceLock
from ralph_supervisor import masking, state_folder
from ralph_supervisor.run_folder import RunFolder, RunFolderError
from ralph_supervisor import worktree
from ralph_supervisor.process.namespace import box_namespace
from ralph_supervisor.sandbox import box_for
from ralph_supervisor.state_guard import StateGuard
from ralph_supervisor.store import atomic_write_text
from ralph_supervisor.hooks import HookRunner
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.keeper import SnapshotKeeper
from ralph_supervisor.limit_wait import LimitWait, Wait
from ralph_supervisor.loop_waits import LoopWaits
from ralph_supervisor.logging import colors_on, configure_logging, for_people
from ralph_supervisor.memory import release_free_memory, tune_allocator
from ralph_supervisor.notify import (
    Notifier,
    notice_for_child_exit,
    notice_for_limit_wait,
    notice_for_transition,
)
from ralph_supervisor.process.linux import CLOCK_TICKS, ProcStat, set_child_subreaper
from ralph_supervisor.process.orphans import (
    MemberRecord,
    new_marker,
    record_path,
    sweep_orphans,
)
from ralph_supervisor.process.cgroup import RECORD as CGROUP_RECORD
from ralph_supervisor.process.cgroup import VERIFY_RECORD, Limits, LoopCgroup
from ralph_supervisor.process.cgroup import sweep as sweep_cgroup
from ralph_supervisor.process.reaper import Reaper
from ralph_supervisor.process.spawn import loop_stdin, spawn
from ralph_supervisor.process.tree import ProcessTree, member_of, walk
from ralph_supervisor.records import Records, Warnings
from ralph_supervisor.registry import register_supervisor
from ralph_supervisor.report import ReportWriter, render_apart
from ralph_supervisor.report.ending import say_the_end
from ralph_supervisor.report.sources import iteration_fields, started_fields
from ralph_supervisor.sdnotify import (
    SystemdNotifier,
    environment_for_child,
    status_text,
)
from ralph_supervisor.settings import Settings, thresholds_from
from ralph_supervisor.spend import spend_lines
from ralph_supervisor.terminal import Terminal
from ralph_supervisor.tick_rate import tick_interval
from ralph_supervisor.tree_actions import TreeActions
from ralph_supervisor.verify.judgement import Judged
from ralph_supervisor.verify.runner import VerifyRun
from ralph_supervisor.verify.service import VerifyService

log = structlog.get_logger("ralph_supervisor")

TICK_MIN = 0.02
RECENT_REPORTS = 20
SHUTDOWN_WAIT_SECONDS = 5.0
TRIM_EVERY = 100
TEXTFILE_EVERY = 10.0
ESCALATION_HISTORY = 20


def load_breaker(settings: Settings) -> tuple[Breaker, str | None]:
    """The breaker as `state.json` left it; a corrupt file is moved aside and we start CLOSED."""
    thresholds = thresholds_from(settings)
    snapshot, warning = state_json.load(settings.state_dir, move_bad=True)
    if snapshot is None:
        return Breaker(thresholds), f"{warning}; starting CLOSED" if warning else None
    # --token-budget and --cost-budget are per run; the daily budgets are what spans runs.
    return Breaker(thresholds, dataclasses.replace(snapshot, tokens_used=0, cost_used=0.0)), None


class NullMetrics:
    """Metrics when no `--metrics-port` or `--metrics-textfile` is set: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


@dataclass
class ChildInfo:
    pid: int
    started_at: float
    popen: Any


class Supervisor:
    """Builds the parts, routes their events, applies decisions, shuts down. Lives on one event loop."""

    def __init__(self, settings: Settings, terminal: Terminal | None = None, run_dir: Path | None = None,
                 cgroup: tuple[LoopCgroup | None, str | None] | None = None) -> None:
        self.settings = settings
        self.guard: StateGuard | None = None
        self._escalation_text: str | None = None
        self.terminal = terminal or Terminal(None, None)
        """The loop's echo and our lines on the terminal, never blocking (terminal.py); none by default."""
        self.state_dir = settings.state_dir
        self.loop = asyncio.get_running_loop()
        self.exit_code: asyncio.Future[int] = self.loop.create_future()
        self.breaker, self._state_warning = load_breaker(settings)
        self.child: ChildInfo | None = None
        self.reports: deque[IterationReport] = deque(maxlen=RECENT_REPORTS)
        self._signals = 0
        self.hurry = False
        """A second signal: leave at once (the shutdown waits for nothing)."""
        self._ended_by_itself = False
        self._background: set[asyncio.Task[Any]] = set()
        self._restart_pending = False
        self._started_wall = time.time()
        self._last_tree_size = 0
        self._last_textfile = 0.0
        self._oom_kills = 0
        self._wake = asyncio.Event()
        self._interval_call: CallEvidence | None = None
        self._call_changed_at = time.monotonic()
        """The call the tick last saw and since when: a quiet loop is looked at less often (tick_rate.py)."""

        # the records and the humans
        self.warnings = Warnings()
        self.records = Records(self.state_dir, f"supervised: {' '.join(settings.command)}", self.warnings)
        if settings.worktree:  # the daily budgets count across the worktrees of one repository
            self.records.spend_dir = worktree.spend_folder(self.state_dir, self.records.spend_dir)
        self.sd = SystemdNotifier()
        self.notifier = Notifier.from_settings(settings)
        self.metrics: Any = NullMetrics()
        if settings.metrics_port is not None or settings.metrics_textfile is not None:
            from ralph_supervisor.metrics import (
                Metrics,  # prometheus_client only when asked for
            )

            self.metrics = Metrics(str(settings.workspace), settings.name)
            self.metrics.follow(self._gauges)  # read at each scrape or textfile
            self.metrics.budgets(token=settings.token_budget, cost=settings.cost_budget,
                                 daily_token=settings.daily_token_budget, daily_cost=settings.daily_cost_budget)

        # the tree
        self.subreaper = set_child_subreaper()
        self.reaper = Reaper()
        self.tree_marker = new_marker()  # NAME=value, put into the child's environment
        self.member_record = MemberRecord(record_path(self.state_dir), marker=self.tree_marker)
        self.hooks = HookRunner(settings.on_open_hook, cwd=settings.workspace, timeout=settings.hook_timeout,
                                on_spawn=self.reaper.leave_alone)  # run_hook waits for its own process
        # the workspace's snapshots; their git processes are never the tree's
        self.keeper = SnapshotKeeper(settings, metrics=lambda: self.metrics)
        self.verify = VerifyService.create(settings, self.keeper.store, self._verified_threadsafe)
        if self.verify is not None:
            self.keeper.on_snapshot = self.verify.snapshot_taken
        self.tree = ProcessTree(os.getpid(), self.reaper)  # helper processes (hooks, git) are never its members
        self.cgroup, no_cgroup = cgroup if cgroup is not None else LoopCgroup.create(self.state_dir)
        """The loop's own cgroup (process/cgroup.py): its figures, and a kill at the end of a stop; None where
        none can be made (the signals then do the work alone)."""
        (log.info("cgroup_made", path=str(self.cgroup.path)) if self.cgroup is not None
         else log.info("cgroup_unavailable", reason=no_cgroup, fallback="the tree is paused and stopped by signals"))
        if self.cgroup is not None:
            self.metrics.follow_cgroup(self.cgroup.figures)
        self.verify_cgroup: LoopCgroup | None = None
        """The verify's cgroup: the tree's bounds (--memory-max, ...) for the agent's tests too."""
        limits = Limits(settings.memory_max, settings.cpu_max, settings.tasks_max)
        if self.verify is not None and self.cgroup is not None and limits.any:
            self.verify_cgroup, no_verify_cgroup = LoopCgroup.create(self.state_dir, limits, record=VERIFY_RECORD,
                                                                     role="verify")
            if self.verify_cgroup is not None:
                self.verify.verifier.enter = self.verify_cgroup.enter
                log.info("cgroup_made", path=str(self.verify_cgroup.path), role="verify")
            else:
                log.warning("cgroup_unavailable", reason=no_verify_cgroup, role="verify",
                            fallback="the verify runs without the tree's bounds")
        # report.html at every open (and at exit), rendered on a thread; its git calls stay out of the tree.
        self.report_writer = ReportWriter(self.state_dir)
        self.actions = TreeActions(self.tree, grace=settings.grace, metrics=self.metrics,
                                   collect_exits=self._on_sigchld, extend_timeout=self.sd.extend_timeout,
                                   terminal=self.terminal, leader=lambda: self.child.pid if self.child else None)

        # the evidence
        self.tracker = IterationTracker(settings.iteration_process, settings.iteration_marker, self.breaker.iteration)
        self.analysis = OutputAnalysis(self.loop, line_cap=settings.line_cap, marker=self.tracker.marker,
                                       deliver=self._output_analysed)
        self.child_log = child_log.open_log(self.state_dir, settings.log_max_bytes, settings.log_total_bytes,
                                            on_error=lambda exc: log.warning("child_log_unwritable", error=str(exc)))
        self.tap = OutputTap(self.child_log, self.analysis.queue, echo=self.terminal.echo,
                             tag=lambda: self.tracker.tag)
        self.tailer = Tailer(settings.workspace, settings.tail_globs(), self._tailed)
        self.silence = SilenceMeter(time.time())
        self.returns = Returns()
        """The state the workspace ended each iteration in: a return to one is not progress."""
        self.limits = LimitWait(settings.limit_wait_margin)
        self.limit_until: float | None = None
        """While the tree is frozen for a usage limit: until when (epoch seconds)."""
        self.waits = LoopWaits(settings, self.warnings, lambda: self.metrics, self.notifier)
        """The usage ceiling and API outages (loop_waits.py): when they call for a freeze of the tree."""
        self.countdown = countdown_for(settings, self.terminal)
        """The time left of every wait, on the terminal (countdown.py); says nothing without a person to read it."""
        self.workspace = Workspace(settings.workspace, state_dir=self.state_dir, ignore=settings.ignore,
                                   on_change=self._file_changed_threadsafe)
        self._ws_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ralph-workspace")
        """Iteration boundaries may block briefly (queued kernel events): one worker keeps them in order."""
        self.control: ControlServer | None = ControlServer(socket_path(self.state_dir), self._handle_control)

        # the calls: announced by the shims on PATH, or sampled from the tree (evidence/calls.py)
        self.calls = CallWatcher(self.tracker, self.workspace, self._ws_pool, settings.iteration_process,
                                 CallHooks(started=self._call_started, build=self._build_report, report=self._observe,
                                           settle_output=self._settle_output, marks=self.tap.marks))
        self.actions.calls = self.calls.gate
        self.actions.hold = self.cgroup.hold if self.cgroup is not None else None  # an atomic pause
        # the shims go in this run's private folder, neither in the workspace nor in the state folder
        boxed = settings.sandbox == "bwrap"
        self._child_env = (self.calls.prepare(run_dir, self._child_environment(), boxed=boxed)
                           if run_dir is not None else self._child_environment())
        if boxed:  # the box has PIDs of its own: the shims' notices name those
            self.calls.box_namespace = lambda: box_namespace(self.child.pid) if self.child is not None else None
        self.box = box_for(settings, self._child_env, self.calls.shims, self.tree_marker.partition("=")[0])
        """The loop's bubblewrap box (`--sandbox bwrap`), None without one."""

    # ------------------------------------------------------------------ set-up and tear-down

    async def run(self) -> int:
        settings = self.settings
        self._install_signals()
        await asyncio.to_thread(self.workspace.start)
        if self.verify is not None:
            self.verify.start()
        self.keeper.start(self.breaker.iteration, lambda: self.workspace.ignored_prefixes)
        self.calls.start()
        try:
            await self.control.start()  # type: ignore[union-attr]
        except OSError as exc:
            log.warning("control_socket_unavailable", error=str(exc))
            self.control = None
        self._serve_metrics()
        log.info(events.SUPERVISOR_STARTED, pid=os.getpid(), workspace=str(settings.workspace),
                 state_dir=str(self.state_dir), command=list(settings.command), subreaper=self.subreaper,
                 breaker=self.breaker.state.value, watcher=self.workspace.mode, **started_fields(settings))
        if self._state_warning:
            log.warning("state_file_corrupt", detail=self._state_warning)

        if self.breaker.state is State.OPEN or self.breaker.final:
            log.info(events.BREAKER_STILL_OPEN, trigger=self.breaker.trigger, reason=self.breaker.reason,
                     seconds_left=self.breaker.seconds_until_half_open(time.time()))
            if self.breaker.final:
                log.warning(events.BREAKER_FINAL, reason=self.breaker.reason)
                print(f"ralph-supervise: the breaker opened for good ({self.breaker.trigger}: {self.breaker.reason}); "
                      f"run `ralph-supervise reset -w {self.settings.workspace}` to start again", file=sys.stderr)
                self._finish(EXIT_FOR_GOOD)
        elif not (self._signals or self._exiting()):  # a signal during start-up: never start the command
            self._spawn()
        self._save()
        self.guard = StateGuard(self.state_dir, self._write_again)  # a file of ours deleted comes back
        self.sd.ready(self._sd_status())

        ticker = asyncio.create_task(self._tick_loop())
        code = await self.exit_code
        ticker.cancel()
        await self._shutdown()
        return code

    def _serve_metrics(self) -> None:
        port = self.settings.metrics_port
        if port is None:
            return
        try:
            bound = self.metrics.serve(port, self.settings.metrics_host)
            log.info("metrics_listening", host=self.settings.metrics_host, port=bound)
        except OSError as exc:  # supervision goes on without the endpoint; the line names the flag and port
            log.warning("metrics_unavailable", option="--metrics-port", host=self.settings.metrics_host, port=port,
                        error=exc.strerror or str(exc))

    def _install_signals(self) -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        self.loop.add_signal_handler(signal.SIGINT, self._on_signal, signal.SIGINT)
        self.loop.add_signal_handler(signal.SIGTERM, self._on_signal, signal.SIGTERM)
        self.loop.add_signal_handler(signal.SIGCHLD, self._on_sigchld)
        for signum in _EARLY_SIGNALS:  # SIGTERM or SIGINT before the event loop took over: honour it now
            self._on_signal(signum)
        _EARLY_SIGNALS.clear()

    async def _shutdown(self) -> None:
        """Stop what is left and close every part. After a second signal (`hurry`) nothing is waited for:
        no last call report, no last snapshot or report, no notice still on its way."""
        if self.countdown is not None:
            self.countdown.close()
        if self.tree.scan():
            await self.actions.stop("supervisor_exit", self.tracker.number)
        self._kill_cgroup("supervisor_exit")
        wait_s = 0.0 if self.hurry else SHUTDOWN_WAIT_SECONDS
        try:  # the call a stop cut short is still reported
            await asyncio.wait_for(self.calls.finish_current(), max(0.01, wait_s))
        except (asyncio.TimeoutError, Exception) as exc:  # noqa: BLE001
            if not self.hurry:
                log.warning("call_reports_unfinished", error=repr(exc))
        self.calls.close()
        self.tap.detach_all()
        self._on_sigchld()
        deadline = time.monotonic() + wait_s
        for task in list(self._background):
            try:
                await asyncio.wait_for(asyncio.shield(task), max(0.01, deadline - time.monotonic()))
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
        await asyncio.to_thread(self.report_writer.close, 0.0 if self.hurry else 10.0)
        await asyncio.to_thread(self.keeper.close, self.tracker.number, last=not self.hurry)
        if self.verify is not None:
            await asyncio.to_thread(self.verify.close)
        self.hooks.kill_all()  # a hook still running when we leave is cut off (its runner thread then returns)
        if self.control is not None:
            await self.control.close()
        self._ws_pool.shutdown(wait=True)
        await asyncio.to_thread(self.workspace.stop)
        await asyncio.to_thread(self.analysis.close)  # never block the loop: the worker may be handing off to it
        read, dropped = self.tap.counters.bytes_read, self.analysis.dropped_bytes
        log.info("output_analysed", bytes_read=read, bytes_scanned=read - dropped, analysis_dropped_bytes=dropped,
                 cut_lines=self.analysis.cut_lines())  # what the error filter saw of the run's output, and missed
        self._save()
        self._write_metrics_textfile(force=True)
        self.notifier.close(0.0 if self.hurry else 2.0)
        await asyncio.to_thread(self.metrics.close)  # after a final stop it waits for one more scrape
        self.sd.stopping()
        figures = self.cgroup.figures() if self.cgroup is not None else None
        if figures is not None:  # what the loop used in all, for the report
            log.info(events.CGROUP_FIGURES, **figures.to_dict())
        if self.cgroup is not None and not self.cgroup.remove(self.state_dir):
            log.warning("cgroup_left", path=str(self.cgroup.path), hint="swept at the next start")
        if self.verify_cgroup is not None and not self.verify_cgroup.remove(self.state_dir, record=VERIFY_RECORD):
            log.warning("cgroup_left", path=str(self.verify_cgroup.path), hint="swept at the next start")
        self.child_log.close()
        self.records.close()
        if self.guard is not None:
            self.guard.close()
        try:
            self.member_record.clear()
        except OSError as exc:
            self.warnings.once("tree_record_failed", error=str(exc))

    def _finish(self, code: int) -> None:
        if not self.exit_code.done():
            self.exit_code.set_result(code)

    def _exiting(self) -> bool:
        """The exit code is decided: no new iteration may begin."""
        return self.exit_code.done()

    def _spawn_task(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_log_task_error)
        return task

    # ------------------------------------------------------------------ the child

    def _child_environment(self) -> dict[str, str]:
        env = dict(environment_for_child(os.environ))
        env["RALPH_SUPERVISE"] = "1"
        name, _, value = self.tree_marker.partition("=")
        env[name] = value  # lets a successor find orphans started after the last record
        env["RALPH_SUPERVISE_STATE_DIR"] = str(self.state_dir)
        return env

    def _spawn(self) -> None:
        settings = self.settings
        self.calls.gate.release()  # a restart after a stop: its calls may run
        argv, env = list(settings.command), self._child_env
        if self.box is not None:
            problem = self.box.problem() or self.box.probe()  # nothing is spawned in a box that cannot be made
            if problem:
                log.error("sandbox_unavailable", error=problem)
                print(f"ralph-supervise: {problem}", file=sys.stderr)
                self._finish(1)
                return
            argv, env = self.box.wrap(argv), self.box.env
        began = time.time()  # before the fork: a first call of milliseconds may be over before spawn returns
        try:
            popen = spawn(argv, settings.workspace, env, loop_stdin(),
                          enter=self.cgroup.enter if self.cgroup is not None else None)
        except OSError as exc:
            log.error("child_spawn_failed", command=list(settings.command), error=str(exc))
            print(f"ralph-supervise: cannot run {settings.command[0]}: {exc.strerror or exc}", file=sys.stderr)
            self._finish(127 if isinstance(exc, FileNotFoundError) else 126)
            return
        self.reaper.adopt(popen)
        assert popen.stdout is not None and popen.stderr is not None
        self.tap.attach(os.dup(popen.stdout.fileno()), "stdout")
        self.tap.attach(os.dup(popen.stderr.fileno()), "stderr")
        popen.stdout.close()
        popen.stderr.close()
        self.child = ChildInfo(popen.pid, began, popen)
        self.calls.child_started(self.child.started_at)
        self.actions.paused = False
        log.info(events.CHILD_STARTED, pid=popen.pid, command=list(settings.command))
        self.metrics.child_running(True)

    def _on_sigchld(self) -> None:
        codes = self.reaper.reap()
        child = self.child
        if child is not None and child.pid in codes:
            self._child_exited(codes[child.pid])

    def _child_exited(self, code: int) -> None:
        child, self.child = self.child, None
        assert child is not None
        log.info(events.CHILD_EXITED, pid=child.pid, code=code, iteration=self.tracker.number)
        self.metrics.child_running(False)
        if self.actions.stopping or self._restart_pending:
            return
        self.notifier.send(notice_for_child_exit(code=code, workspace=str(self.settings.workspace),
                                                 state=self.breaker.state.value, trigger=self.breaker.trigger,
                                                 iteration=self.tracker.number))
        self._spawn_task(self._child_ended_by_itself(code))

    async def _child_ended_by_itself(self, code: int) -> None:
        """The loop ended on its own: finish the call in progress, clear the rest of the tree, exit with its code."""
        self._ended_by_itself = True  # a verdict that comes in while the last verifies run restarts nothing
        try:
            await self.tap.wait_closed(timeout=1.0)
            # The last output may still be in analysis: in marker mode it can start the very call to finish.
            await asyncio.to_thread(self.analysis.wait_done, self.tap.last_seq, 5.0)
            if self.tree.scan():
                await self._stop_tree(events.STOP_CHILD_EXITED)
            await self.calls.finish_current()
            if self.verify is not None:
                opens = self.breaker.total_opens
                code = await asyncio.to_thread(self.verify.finish, code, self.keeper.idle)
                if self.breaker.total_opens > opens and (self.breaker.final or self.settings.on_open == "stop"):
                    code = EXIT_FOR_GOOD  # a verdict on the last iterations opened the breaker for good
        finally:
            self._finish(code)  # whatever went wrong in the bookkeeping, the child's code is the answer

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        self.metrics.stop_lingering()  # a signal: no waiting for a last scrape
        code = 128 + signum
        if self._signals == 1:
            log.info("signal_received", signal=signal.Signals(signum).name, action="stop the tree gracefully")
            self._spawn_task(self._stop_and_exit(code, events.STOP_SIGNAL))
        else:
            log.warning("signal_received", signal=signal.Signals(signum).name, action="kill the tree now")
            self.hurry = True
            self.actions.kill_now("second_signal", self.tracker.number)
            self.hooks.kill_all()
            self._finish(code)

    async def _stop_and_exit(self, code: int, why: str) -> None:
        await self._stop_tree(why)
        self._finish(code)

    async def _stop_tree(self, why: str) -> None:
        """Stop the whole tree (see `TreeActions.stop`) and collect the child's exit."""
        await self.actions.stop(why, self.tracker.number)
        self._kill_cgroup(why)
        if self.child is not None and self.reaper.exit_code(self.child.pid) is not None:
            self.child = None

    def _kill_cgroup(self, why: str) -> None:
        """A stop ends with `cgroup.kill`: whatever the signals missed, however it left the tree."""
        if self.cgroup is not None:
            left = self.cgroup.kill()
            if left:
                log.warning("cgroup_killed", processes=left, reason=why, path=str(self.cgroup.path))
                self._on_sigchld()

    # ------------------------------------------------------------------ decisions

    async def apply(self, decision: Decision, plan: Plan | None = None) -> None:
        """Carry out a decision, whoever made it: history, then state, then the tree, then what follows an
        open (the summary, the hook, the notices). `plan` overrides what the decision asks of the tree
        (a control request); without one it follows from the decision and `--on-open`."""
        async with self.actions.lock:
            await self._apply(decision, plan)

    async def _apply(self, decision: Decision, plan: Plan | None, *, record: bool = False) -> None:
        """`apply` with the lock held. `record`: write the history line even when the state did not change
        (a `pause` of a breaker already OPEN: the trigger becomes `manual`)."""
        if decision.changed or record:
            self._record_transition(decision)
        self._save()
        plan = plan_for(decision, on_open=self.settings.on_open) if plan is None else plan
        opened = decision.action in ("open", "final")
        if opened and decision.trigger != "manual":
            self.keeper.opened(decision.trigger)
            self._write_escalation(decision)
        if plan is Plan.PAUSE:
            if not self.actions.paused:
                await self.actions.pause(self.tracker.number)
        elif plan is Plan.STOP_AND_RESTART:
            self._restart_pending = True
            await self._stop_tree(events.STOP_BREAKER_OPEN)
        elif plan is Plan.STOP_FOR_GOOD:
            await self._stop_tree(events.STOP_BREAKER_FINAL)
            self._finish(EXIT_FOR_GOOD)
        elif plan is Plan.TRIAL:
            await self._start_trial()
        elif plan is Plan.STOP_AND_EXIT:
            await self._stop_tree(events.STOP_REQUEST)
            self._finish(EXIT_STOP_REQUEST)
        if opened and decision.trigger != "manual" and self.hooks.command:
            # After the tree action, so the hook is never frozen or stopped with the tree.
            payload = json.dumps({**decision.to_dict(), "workspace": str(self.settings.workspace),
                                  "state_dir": str(self.state_dir)})
            self._spawn_task(self.hooks.run(payload, decision.iteration))
        if opened:
            self.report_writer.request()

    async def _start_trial(self) -> None:
        """HALF_OPEN (or a resume, a reset): thaw the tree, or start the command again when it was stopped."""
        self.silence.restart(time.time())
        if self.actions.paused:
            await self.actions.resume(self.tracker.number)
        elif self.child is None and not self._exiting() and not self._ended_by_itself:
            self._restart_pending = False
            self._spawn()

    def _record_transition(self, decision: Decision) -> None:
        self.records.transition(decision)  # the breaker's gauges follow it (`_gauges`)
        if decision.state is State.OPEN:
            self.metrics.breaker_opened(decision.trigger)
        self.sd.status(self._sd_status())
        notice = notice_for_transition(from_state=decision.from_state.value, to_state=decision.state.value,
                                       trigger=decision.trigger, reason=decision.reason,
                                       iteration=decision.iteration, workspace=str(self.settings.workspace),
                                       final=decision.final)
        if notice is not None:
            self.notifier.send(notice)

    def _write_escalation(self, decision: Decision) -> None:
        history = self.records.history_tail(ESCALATION_HISTORY + 1)[:-1]  # before this open
        summary = {
            "workspace": str(self.settings.workspace),
            "command": " ".join(self.settings.command),
            "on_open": self.settings.on_open,
            "state_dir": str(self.state_dir),
        }
        snapshot, today = self.breaker.snapshot(), self.records.spend(0, 0.0, time.time())
        reported_cost = snapshot.cost_used > 0 or any(r.cost_usd is not None for r in self.reports)
        s = self.settings
        spend = spend_lines(tokens=snapshot.tokens_used, cost_usd=snapshot.cost_used if reported_cost else None,
                            token_budget=s.token_budget, cost_budget=s.cost_budget, daily_tokens=today.tokens,
                            daily_cost_usd=today.cost_usd, daily_token_budget=s.daily_token_budget,
                            daily_cost_budget=s.daily_cost_budget)
        try:
            text = render_escalation(decision, list(self.reports), history, summary, store.iso_utc(),
                                     restore=self.keeper.restore_lines(decision.trigger), spend=spend)
        except Exception as exc:  # noqa: BLE001 - the summary is a courtesy; the stop is not
            self.warnings.once("escalation_unwritable", error=str(exc))
            return
        self.records.escalation(text)
        self._escalation_text = text

    async def _observe(self, report: IterationReport, now: float) -> None:
        """A finished iteration: log it, keep it, judge it."""
        self.reports.append(report)
        tokens = report.tokens or 0
        self._say_what_cannot_be_judged(report)
        spend = self.records.spend(tokens, report.cost_usd or 0.0, now)
        outcome = ledger_json.outcome_of(report)
        log.info(events.ITERATION_FINISHED, iteration=report.number, files_changed=report.files_changed,
                 commits=report.commits, output_bytes=report.output_bytes, errors=len(report.error_signatures),
                 tokens=tokens, outcome=outcome, failed=report.failed, usage_limited=report.usage_limited,
                 blocked=report.blocked, cut_short=report.cut_short, cost_usd=report.cost_usd,
                 returned_to=report.returned_to, agent=report.agent or None, exit_status=report.exit_status,
                 killed_by=report.killed_by, timed_out=report.timed_out, paths=list(report.changed_paths[:5]),
                 duration_s=round(report.ended_at - report.started_at, 3), **iteration_fields(report))
        self.metrics.iteration_finished(files_changed=report.files_changed, output_bytes=0, tokens=tokens)
        self.metrics.add_cost(report.cost_usd or 0.0)
        self.metrics.daily_spend(tokens=spend.tokens, cost_usd=spend.cost_usd)
        self.records.attempt(report)
        if self.verify is not None:
            self.verify.observed(report)
        if report.number % TRIM_EVERY == 0:
            release_free_memory()
        destroyed = await asyncio.to_thread(self.keeper.verdict, report.number)  # first: it precedes the rest
        if destroyed is not None:
            self._destroying(destroyed, report.number)
        decision = self.breaker.observe(report, now, daily_tokens_today=spend.tokens,
                                        daily_cost_today=spend.cost_usd)
        if decision.changed:
            await self.apply(decision)
        else:
            self._save()
        wait = self.limits.observe(limited=report.usage_limited, resets_at=report.limit_resets_at, now=now)
        if wait is not None and self.settings.limit_wait == "off":
            self.warnings.once("limit_wait_off", event_name="limit_wait_skipped", iteration=report.number,
                               detail="a usage limit: --limit-wait off leaves the wait to the loop (counted toward no rule)")
        elif wait is not None:
            await self._begin_limit_wait(wait, report.number)
        wait = self.waits.call_ended(report, now)  # the usage ceiling, an outage
        if wait is not None and self.limit_until is None:
            await self._begin_limit_wait(wait, report.number)

    def _say_what_cannot_be_judged(self, report: IterationReport) -> None:
        """A budget on something the call's agent does not report is said once, never guessed."""
        agent = report.agent or "this agent"
        if report.cost_usd is None and (self.settings.cost_budget or self.settings.daily_cost_budget):
            self.warnings.once(f"cost_unknown:{agent}", event_name="cost_unknown", agent=agent,
                               detail=f"{agent} reports no cost: its calls add nothing to the dollar budgets")
        if report.tokens is None and (self.settings.token_budget or self.settings.daily_token_budget):
            self.warnings.once(f"tokens_unknown:{agent}", event_name="tokens_unknown", agent=agent,
                               detail=f"{agent} reports no tokens: its calls add nothing to the token budgets")

    # ------------------------------------------------------------------ usage-limit waits

    async def _begin_limit_wait(self, wait: Wait, iteration: int) -> None:
        """Freeze the tree until the limit resets (the breaker stays CLOSED; no rule counts it)."""
        if wait.ignored_reset is not None:
            self.warnings.once("limit_reset_ignored", reset=store.iso_utc(wait.ignored_reset),
                               detail="a reset time in the past or more than 7 days ahead is not believed")
        async with self.actions.lock:
            if self._exiting() or self.child is None or self.breaker.state is not State.CLOSED or self.actions.paused:
                return
            await self.actions.pause(iteration)
            self.limit_until = wait.until
            self.waits.kind = wait.kind
            self._save()
            log.info(events.LIMIT_WAIT_STARTED, until=store.iso_utc(wait.until), known_reset=wait.known_reset,
                     reason=wait.reason, iteration=iteration, kind=wait.kind)
            self.metrics.limit_wait(wait.until)
            self.sd.status(self._sd_status())
            self.notifier.send(notice_for_limit_wait(until=store.iso_utc(wait.until), reason=wait.reason,
                                                     workspace=str(self.settings.workspace), iteration=iteration,
                                                     kind=wait.kind))

    async def _end_limit_wait(self, why: str) -> None:
        """Thaw the tree frozen for a usage limit (its time is up, or `resume`). Call with the lock held."""
        if self.limit_until is None:
            return
        self.limit_until = None
        self._save()
        self.metrics.limit_wait(None)
        log.info(events.LIMIT_WAIT_ENDED, why=why, iteration=self.tracker.number)
        if self.actions.paused and self.breaker.state is State.CLOSED:
            self.silence.restart(time.time())
            await self.actions.resume(self.tracker.number)
        self.sd.status(self._sd_status())

    # ------------------------------------------------------------------ control socket

    async def _handle_control(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request.get("cmd")
        now = time.time()
        if cmd == "status":
            return self.status()
        if cmd not in ("pause", "resume", "reset", "stop"):
            raise ControlError(f"unknown command {cmd!r}")
        async with self.actions.lock:
            if self.limit_until is not None:
                if cmd in ("resume", "reset"):
                    await self._end_limit_wait(f"{cmd} by request")
                else:  # a pause (or stop) by hand takes over from the wait: no thaw when the limit resets
                    self.limit_until = None
                    self.metrics.limit_wait(None)
            if cmd == "pause":
                if self.actions.paused and self.breaker.state is State.OPEN:
                    return {"message": "the tree is already paused", **self.status()}
                await self._apply(self.breaker.manual_open("paused by request (ralph-supervise pause)", now),
                                  plan_for_request(cmd), record=True)
                return {"message": f"paused {self._last_tree_size} processes", **self.status()}
            if cmd == "stop":
                await self._apply(Decision("none", self.breaker.state, self.breaker.trigger, "stop requested",
                                           self.breaker.iteration), plan_for_request(cmd))
                return {"message": "the tree is stopped; the supervisor exits"}
            decision = self.breaker.resume(now) if cmd == "resume" else self.breaker.reset()
            await self._apply(decision, plan_for_request(cmd))
            message = "resumed: the next iteration is the trial" if cmd == "resume" else "breaker reset to CLOSED"
            return {"message": message, **self.status()}

    def status(self) -> dict[str, Any]:
        """The `status --json` answer (`status_json.reply`), plus the live extras the `watch` view shows."""
        members = self.tree.sample()
        child = self.child
        figures = self.cgroup.figures() if self.cgroup is not None else None
        data = status_json.reply(
            self.breaker, limit_until=self.limit_until, supervisor_pid=os.getpid(),
            child=None if child is None else {"pid": child.pid, "running": True, "paused": self.actions.paused,
                                              "processes": len(members)},
            snapshots=self.keeper.status(), verify=self.verify.status() if self.verify is not None else None,
            waits=self.waits.status(time.time(), frozen=self.limit_until is not None),
            cgroup=None if figures is None else {"path": str(self.cgroup.path), **figures.to_dict()})
        call = self.tracker.current
        if call is not None:
            data["current"] = {"iteration": call.number, "started_at": store.iso_utc(call.started_wall),
                               "age_s": round(time.time() - call.started_wall, 1)}
        data["tree"] = [{"pid": stat.pid, "name": stat.name, "status": stat.state,
                         "cpu_s": round(stat.cpu_ticks / CLOCK_TICKS, 2)} for stat in members[:50]]
        data["tap"] = {"bytes_read": self.tap.counters.bytes_read,
                       "analysis_dropped_bytes": self.analysis.dropped_bytes,
                       "analysis_lag_bytes": self.analysis.lag_bytes,
                       "cut_lines": self.analysis.cut_lines(),
                       "echo_dropped_bytes": self.terminal.echo_dropped_bytes}
        return data

    # ------------------------------------------------------------------ output and file changes

    def _output_analysed(self, results: list[OutputResult]) -> None:
        for result in results:
            self._route_output(result)

    def _route_output(self, result: OutputResult) -> None:
        if self.tracker.marker is None:
            self.tracker.add_output(result, time.time())
            if self.tracker.current is None:
                self._wake.set()  # output while no call is known: a short call may be running, sample now
        else:
            if result.starts and not self._exiting():
                self.calls.marker_boundary(time.time())
            self.tracker.add_output(result, time.time())
        if result.text is not None:
            self.waits.output(result.text, self.tracker.number, time.time())  # the agent's own retry reports
        self.metrics.add_output_bytes(result.nbytes)

    def _tailed(self, source: str, data: bytes) -> None:
        self.tap.counters.last_output_at = time.monotonic()
        self.tap.last_seq = self.analysis.submit(Chunk(source, data, self.tracker.tag, time.time()))

    def _file_changed_threadsafe(self, change: Change) -> None:
        self.keeper.saw(change)
        try:
            self.loop.call_soon_threadsafe(self.silence.file_changed, time.time())
        except RuntimeError:
            pass

    def _destroying(self, reason: str, iteration: int | None = None) -> None:
        """An iteration destroyed the workspace (the keeper's verdict, or the user's `.git` gone between
        calls): open now."""
        if self._exiting():
            return
        decision = self.breaker.destructive_open(reason, time.time(), iteration)
        if decision.changed:
            self._spawn_task(self.apply(decision))

    def _verified_threadsafe(self, judged: Judged, run: VerifyRun) -> None:
        try:
            self.loop.call_soon_threadsafe(self._verified, judged, run)
        except RuntimeError:
            pass

    def _verified(self, judged: Judged, run: VerifyRun) -> None:
        """A verify's verdicts, after its iteration was judged: they may open, never undo an open."""
        r = run.results if run.verified else None
        self.metrics.verified(seconds=run.seconds, counts=None if r is None else {
            "passed": r.passed, "failed": r.failed, "errors": r.errors, "skipped": r.skipped})
        if judged.progress:
            self.breaker.verified_progress()
        tripping = [v for v in judged.verdicts if v.trip]
        if tripping and not self._exiting():
            if tripping[0].trigger == "tampering" and run.previous_snapshot is not None:
                self.keeper.hold("tampering", run.previous_snapshot)  # the escalation names the tests before
            decision = self.breaker.verdict_open(tripping[0].trigger, tripping[0].reason, time.time())
            if decision.changed:
                self._spawn_task(self.apply(decision))

    # ------------------------------------------------------------------ the tick

    async def _tick_loop(self) -> None:
        while True:
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a fault of ours never takes the child down
                log.exception("tick_failed", error=str(exc))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), self._tick_interval(time.monotonic()))
                await asyncio.sleep(TICK_MIN)  # woken by output: look now, but not more often than this
            except asyncio.TimeoutError:
                pass

    def _tick_interval(self, now: float) -> float:
        """Sample fast only when a call may be starting (output, no call yet) or has just started; slower
        while a long call runs: its end can wait a moment, and a stall is judged in minutes (tick_rate.py)."""
        call = self.tracker.current
        if call is not self._interval_call:
            self._interval_call, self._call_changed_at = call, now
        return tick_interval(now, call_started_at=call.started_at if call is not None else None,
                             last_output_at=self.tap.counters.last_output_at, changed_at=self._call_changed_at,
                             watchdog=self.sd.watchdog_interval)

    async def _tick(self) -> None:
        now = time.time()
        self._on_sigchld()
        await self._keep_state_whole()
        gone = self.keeper.repository_gone()  # the user's .git deleted: its commits are in the store
        if gone is not None:
            self._destroying(gone)
        self.tailer.poll()
        stopping = self.actions.stopping
        stats = self.tree.sample() if not stopping else []
        self._record_members(stats)
        if self.tracker.marker is None and not stopping:
            self.calls.sample(stats, now)
        if self.limit_until is not None and now >= self.limit_until:
            async with self.actions.lock:
                await self._end_limit_wait("the limit has reset")
        if self.countdown is not None:
            self.countdown.update(waits_now(limit_until=self.limit_until, breaker=self.breaker, now=now,
                                            limit_kind=self.waits.kind), now)
        due = self.waits.due(now) if self.limit_until is None and not self.actions.paused and not stopping else None
        if isinstance(due, Wait):
            await self._begin_limit_wait(due, self.tracker.number)
        elif due is not None and not self._exiting():
            await self.apply(self.breaker.verdict_open("outage", due.reason, now))
        in_retries = self.waits.outage.on and self.tracker.current is not None  # an agent waiting for its API
        silent_since = None if in_retries else self._silent_since(stats, now)
        waiting = None
        if silent_since is None and not in_retries and self.child is not None and not self.actions.paused and not stopping:
            waiting = self.calls.waiting_since()  # no call runs: since when the loop has not reached its agent
        if waiting is not None:
            decision = self.breaker.tick(now, silent_since=waiting, waiting_for_call=True,
                                         loop_errors=tuple(self.tracker.loop_errors))
        else:
            decision = self.breaker.tick(now, silent_since=silent_since)
        if decision.changed:
            await self.apply(decision)
        self.sd.maybe_watchdog(time.monotonic())
        self._write_metrics_textfile()

    def _record_members(self, stats: list[ProcStat]) -> None:
        """Keep `tree.json` current (cheap when unchanged) so a successor can sweep what we leave."""
        size = len(stats)
        if size != self._last_tree_size:
            self._last_tree_size = size
            self.metrics.tree_size(size)
        try:
            self.member_record.record([member_of(stat) for stat in stats])
        except OSError as exc:
            self.warnings.once("tree_record_failed", error=str(exc))

    def _silent_since(self, stats: list[ProcStat], now: float) -> float | None:
        """Since when the current call (or, in marker mode, the tree) has been silent on every channel."""
        if self.actions.paused or not stats:
            return None
        call = self.tracker.current
        if self.tracker.marker is None:
            if call is None or call.pid is None:
                return None
            watched = walk(stats, [call.pid], include_roots=True) + self.calls.container_processes()
        else:
            watched = stats
        last_output = time.time() - (time.monotonic() - self.tap.counters.last_output_at)
        started = call.started_wall if call is not None else self._started_wall
        return self.silence.silent_since(watched, now, call_started=started, last_output=last_output)

    # ------------------------------------------------------------------ agent calls (evidence/calls.py finds them)

    def _call_started(self, call: CallEvidence, now: float) -> None:
        """A call began: its silence counts from here; the breaker learns of it (the trial, the caps)."""
        self.keeper.iteration_started(call.number)
        self._oom_kills = self.cgroup.oom_kills() if self.cgroup is not None else 0
        self.silence.restart(now)
        log.info(events.ITERATION_STARTED, iteration=call.number, pid=call.pid, name=call.name or None)
        self.metrics.iteration_started(now=now)
        self.sd.status(self._sd_status())
        decision = self.breaker.iteration_started(call.number, now)
        self._save()
        if decision.changed:
            self._spawn_task(self.apply(decision))

    async def _settle_output(self) -> None:
        """Everything the pipes and tailed files hold now, analysed (a call just ended)."""
        self.tailer.poll()  # the call's last words in its log file still belong to it
        self.tap.read_now()
        await asyncio.to_thread(self.analysis.wait_done, self.tap.last_seq, 5.0)

    def _build_report(self, call: CallEvidence, ended: float, delta: WorkspaceDelta, *, exit_status: int | None = None,
                      killed_by: int | None = None, timed_out: bool = False) -> IterationReport:
        """A finished call's report: its output read by the adapter of the agent that made it (or --agent's)."""
        from ralph_supervisor.agents import output_warnings, read_call

        self.keeper.iteration_ended(call.number, events_lost=delta.events_lost, net=delta)
        agent = None
        if call.text:
            agent = read_call(call.output_text(), name=call.name, argv=call.argv, agent=self.settings.agent, now=ended)
            call.error_lines.extend(line for line in agent.error_lines if line not in call.error_lines)
            agent = self.waits.read_usage(call.number, agent, ended)  # Codex: from its session file
            for key, event, fields in output_warnings(agent):
                self.warnings.once(key, event_name=event, iteration=call.number, **fields)
        returned_to = self.returns.record(call.number, delta.fingerprint)
        report = build_report(call, ended_at=ended, files_changed=delta.files_changed, changed_paths=delta.paths,
                            commits=delta.commits, agent=agent, signatures=error_set(call.error_lines),
                            returned_to=returned_to, exit_status=exit_status, killed_by=killed_by,
                            timed_out=timed_out)
        return self._oom_hit(report)

    def _oom_hit(self, report: IterationReport) -> IterationReport:
        """An OOM kill inside the loop's cgroup during the call: an event, and the call failed for that reason."""
        kills = self.cgroup.oom_kills() if self.cgroup is not None else 0
        if kills <= self._oom_kills:
            return report
        killed, self._oom_kills = kills - self._oom_kills, kills
        said = (f"Error: killed by the OOM killer ({killed} process{'es' if killed > 1 else ''}): the loop's cgroup "
                f"reached --memory-max {self.settings.memory_max or '(its bound)'} bytes")
        log.warning(events.CGROUP_OOM, iteration=report.number, kills=killed, memory_max=self.settings.memory_max)
        return dataclasses.replace(report, failed=True, outage=False, usage_limited=False, reply=None,
                                   error_lines=(said, *report.error_lines)[:20],
                                   error_signatures=report.error_signatures | error_set([said]))

    # ------------------------------------------------------------------ small things

    def _gauges(self) -> dict[str, Any]:
        """What the metrics read of the breaker at each scrape (any thread: only reads)."""
        snapshot = self.breaker.snapshot()
        return {"state": snapshot.state.value, "final": snapshot.final, "iteration": snapshot.iteration}

    async def _keep_state_whole(self) -> None:
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
                log.warning("control_socket_unavailable", error=str(exc))

    def _write_again(self, name: str) -> None:
        """Write a lost file again from what the supervisor holds."""
        if name == state_json.NAME:
            self._save()
        elif name == ledger_json.NAME:
            ledger = self.records.ledger
            try:
                atomic_write_text(ledger_json.path(self.state_dir), ledger_json.dump_ledger(ledger.goal, ledger.attempts))
            except OSError as exc:
                self.warnings.once("ledger_unwritable", error=str(exc))
        elif name == escalation_md.NAME and self._escalation_text is not None:
            self.records.escalation(self._escalation_text)
        elif name == state_folder.ORIGIN_FILE:
            state_folder.write_origin(self.settings.workspace, self.state_dir)

    def _save(self) -> None:
        self.records.save(self.breaker.snapshot(), limit_until=self.limit_until)

    def _sd_status(self) -> str:
        return status_text(self.breaker.state.value, self.tracker.number, self.breaker.trigger,
                           paused=self.actions.paused)

    def _write_metrics_textfile(self, force: bool = False) -> None:
        path = self.settings.metrics_textfile
        if path is None:
            return
        now = time.monotonic()
        if force or now - self._last_textfile >= TEXTFILE_EVERY:
            self._last_textfile = now
            self.metrics.write_textfile(path)


def _log_task_error(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("supervisor_task_failed", error=repr(exc))


def write_report_at_exit(state_dir: Path) -> None:
    """The last `report.html`, once `supervisor_stopped` is written (the event loop is gone: nothing waits)."""
    try:
        problem = render_apart(state_dir)
    except OSError as exc:  # the report is a courtesy; the exit code is not
        problem = f"cannot start the report's process: {exc.strerror or exc}"
    if problem is not None:
        log.warning(events.REPORT_UNWRITABLE, error=problem)


async def _supervise(settings: Settings, terminal: Terminal,
                     cgroup: tuple[LoopCgroup | None, str | None] | None = None) -> tuple[int, bool]:
    """Supervise; the exit code, and whether a second signal asked to leave at once."""
    try:
        run_dir: RunFolder | None = RunFolder.create()
    except RunFolderError as exc:
        log.warning(events.SHIMS_UNAVAILABLE, error=str(exc), fallback="agent calls are sampled from the tree")
        run_dir = None
    try:
        supervisor = Supervisor(settings, terminal, run_dir.path if run_dir is not None else None, cgroup)
        code = await supervisor.run()
    finally:
        if run_dir is not None:
            run_dir.remove()
    return code, supervisor.hurry


_EARLY_SIGNALS: list[int] = []
"""SIGTERM / SIGINT received before the event loop's handlers exist. As PID 1 (a container) an unhandled
SIGTERM would be dropped, and otherwise it would kill us before we unregister and unlock."""


def _catch_early_signals() -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: _EARLY_SIGNALS.append(received))


def run_supervisor(settings: Settings) -> int:
    """Lock the state folder, sweep what a dead supervisor left, supervise, return the exit code."""
    _catch_early_signals()
    problem = proc_mount_problem()  # a PID namespace without its own /proc: the "tree" would be the machine
    if problem:
        print(f"ralph-supervise: {problem}", file=sys.stderr)
        return 1
    made: worktree.Worktree | None = None
    if settings.worktree:  # the run moves into a new worktree of the checkout, with a state folder of its own
        try:
            settings, made = worktree.take(settings)
        except worktree.WorktreeError as exc:
            print(f"ralph-supervise: {exc}", file=sys.stderr)
            return 1
        print(f"ralph-supervise: {worktree.note(made)}", file=sys.stderr)
    masking.configure(settings.workspace)  # the .env's values are masked in all we show or send
    try:
        where = state_folder.set_up(settings)  # outside the workspace; an old in-workspace folder moved out
        files.prepare(settings.state_dir)
        if made is not None:
            worktree.record(settings.state_dir, made)
    except state_folder.StateFolderError as exc:
        print(f"ralph-supervise: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"ralph-supervise: --state-dir: cannot create {settings.state_dir}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    lock = InstanceLock(lock_file.path(settings.state_dir))
    try:
        lock.acquire()
    except AlreadyRunning as exc:  # the folder is outside the workspace: name the workspace too
        print(f"ralph-supervise: {exc}, the state folder of {settings.workspace}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"ralph-supervise: cannot lock {lock.path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    # The reader (event loop) and the analysis thread share the GIL: with the default 5 ms switch interval
    # every os.read/os.write of the reader may wait 5 ms for a busy analysis thread to let go of it.
    sys.setswitchinterval(0.0005)
    tune_allocator()
    terminal = Terminal.take_over(echo=settings.echo)  # the echo and our lines: a stuck terminal blocks nothing
    event_log = configure_logging(events_jsonl.path(settings.state_dir), settings.log_format, stream=terminal.stderr,
                                  detail=settings.log_detail)
    registration = register_supervisor(settings)  # `ralph-supervise ls` lists this loop until `ls --prune`
    for line in where:  # on stderr as every event is, and in events.jsonl
        log.info("state_folder", state_dir=str(settings.state_dir), note=line)
    if made is not None:
        log.info("worktree_made", **made.to_json())
    code, hurried = 1, False
    try:
        swept = sweep_orphans(record_path(settings.state_dir), grace=min(settings.grace, 2.0))
        (log.warning if swept else log.info)(events.ORPHANS_SWEPT, count=swept)
        for record in (CGROUP_RECORD, VERIFY_RECORD):  # the loop's and the verify's cgroups a crash left
            left = sweep_cgroup(settings.state_dir, record)
            if left is not None:
                log.warning("cgroup_swept", path=left)
        limits = Limits(settings.memory_max, settings.cpu_max, settings.tasks_max)
        cgroup = LoopCgroup.create(settings.state_dir, limits)
        if cgroup[0] is None and limits.any:  # never unbounded when a bound was asked for
            print(f"ralph-supervise: {cgroup[1]}", file=sys.stderr)
            log.error("cgroup_unavailable", reason=cgroup[1])
            code = 1
        else:
            code, hurried = asyncio.run(_supervise(settings, terminal, cgroup))
    except Exception as exc:  # noqa: BLE001 - one clear line, exit 1
        log.exception("supervisor_failed", error=str(exc))
        print(f"ralph-supervise: internal error: {exc}", file=sys.stderr)
        code = 1
    finally:
        log.info(events.SUPERVISOR_STOPPED, code=code, **terminal.settle())  # settle: the rest of the echo, counted
        if not hurried:
            write_report_at_exit(settings.state_dir)
            if for_people(settings.log_format, terminal.stderr):  # the end, in the report's words
                say_the_end(settings.state_dir, sys.argv[1:], terminal.stderr, colors=colors_on(terminal.stderr))
        terminal.close()
        if registration is not None:
            registration.mark_ended(code)  # still listed, marked ended, until `ls --prune`
        if event_log is not None:
            event_log.close()
        lock.release()
    return code
