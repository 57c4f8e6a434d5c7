"""The supervisor: builds the parts, connects them, runs them on one event loop, shuts them down.

One asyncio event loop reads the child's pipes (the tap), serves the control socket, handles signals and
runs a short tick. Evidence flows up into `IterationReport`s; the breaker (pure) answers with `Decision`s;
the applier carries each one out, in one order, whoever asked for it. Each part has one job and its own
module; this one only wires them (start-up before the loop, the lock and the sweep, is `daemon.py`):

| part | module |
|---|---|
| reading the child's pipes, `child.log`; the analysis behind it | `evidence/tap.py`, `evidence/analysis.py` |
| agent calls: which call is running, its evidence | `evidence/calls.py`, `evidence/iterations.py` |
| file changes and commits per iteration | `evidence/workspace.py` |
| the stall rule's silence | `evidence/silence.py` |
| pause, resume, stop, one at a time | `tree_actions.py` |
| the loop's process; its own end | `runtime/child.py`, `runtime/loop_end.py` |
| a call begun and judged; a verify's verdicts | `runtime/judge.py` |
| a decision carried out | `runtime/apply.py` (`decisions.py` says what it means for the tree) |
| waits the tree is frozen for | `runtime/wait_episode.py` |
| the control socket's requests | `runtime/commands.py` |
| the tick | `runtime/tick.py` |
| where analysed output and file events go | `runtime/routing.py` |
| `state.json`, and the state folder kept whole | `runtime/keeping.py`, `records.py`, `files/` |

    >>> code = await Supervisor(settings, terminal, run_dir).run()   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor import events, worktree
from ralph_supervisor.breaker import State
from ralph_supervisor.control import ControlServer, socket_path
from ralph_supervisor.countdown import countdown_for
from ralph_supervisor.decisions import EXIT_FOR_GOOD
from ralph_supervisor.evidence.analysis import OutputAnalysis
from ralph_supervisor.evidence.calls import CallWatcher
from ralph_supervisor.evidence.iterations import IterationTracker
from ralph_supervisor.evidence.silence import SilenceMeter
from ralph_supervisor.evidence.tail import Tailer
from ralph_supervisor.evidence.tap import OutputTap
from ralph_supervisor.evidence.workspace import Workspace
from ralph_supervisor.files import child_log
from ralph_supervisor.hooks import HookRunner
from ralph_supervisor.loop_waits import LoopWaits
from ralph_supervisor.notify import Notifier
from ralph_supervisor.process.cgroup import VERIFY_RECORD, Limits, LoopCgroup
from ralph_supervisor.process.linux import set_child_subreaper
from ralph_supervisor.process.namespace import box_namespace
from ralph_supervisor.process.orphans import MemberRecord, new_marker, record_path
from ralph_supervisor.process.reaper import Reaper
from ralph_supervisor.process.tree import ProcessTree
from ralph_supervisor.records import Records, Warnings
from ralph_supervisor.report import ReportWriter
from ralph_supervisor.report.sources import started_fields
from ralph_supervisor.runtime import signals
from ralph_supervisor.runtime.apply import Applier
from ralph_supervisor.runtime.child import Child, child_environment
from ralph_supervisor.runtime.commands import Commands
from ralph_supervisor.runtime.judge import CallJudge
from ralph_supervisor.runtime.keeping import Keeping, load_breaker
from ralph_supervisor.runtime.lifecycle import Lifecycle
from ralph_supervisor.runtime.loop_end import LoopEnd
from ralph_supervisor.runtime.routing import Routing
from ralph_supervisor.runtime.tick import Ticker
from ralph_supervisor.runtime.wait_episode import WaitEpisode
from ralph_supervisor.sandbox import box_for
from ralph_supervisor.sdnotify import SystemdNotifier, status_text
from ralph_supervisor.settings import Settings
from ralph_supervisor.snapshots.keeper import SnapshotKeeper
from ralph_supervisor.tasks import Background
from ralph_supervisor.terminal import Terminal
from ralph_supervisor.tree_actions import TreeActions
from ralph_supervisor.verify.service import VerifyService

log = structlog.get_logger("ralph_supervisor")

SHUTDOWN_WAIT_SECONDS = 5.0
"""At exit, how long the call a stop cut short and the background tasks may take to finish."""


class NullMetrics:
    """Metrics when no `--metrics-port` or `--metrics-textfile` is set: every call does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class Supervisor:
    """Builds the parts and connects them; runs until the exit code is decided; shuts down. One event loop."""

    def __init__(self, settings: Settings, terminal: Terminal | None = None, run_dir: Path | None = None,
                 cgroup: tuple[LoopCgroup | None, str | None] | None = None) -> None:
        self.settings = settings
        state_dir = settings.state_dir
        self.terminal = terminal or Terminal(None, None)
        """The loop's echo and our lines on the terminal, never blocking (`terminal/`); none by default."""
        self.loop = asyncio.get_running_loop()
        self.life = Lifecycle(self.loop)
        self.background = Background()
        self.breaker, self._state_warning = load_breaker(settings)
        self._started_wall = time.time()

        # the records and the humans
        self.warnings = Warnings()
        self.records = Records(state_dir, f"supervised: {' '.join(settings.command)}", self.warnings)
        if settings.worktree:  # the daily budgets count across the worktrees of one repository
            self.records.spend_dir = worktree.spend_folder(state_dir, self.records.spend_dir)
        self.sd = SystemdNotifier()
        self.notifier = Notifier.from_settings(settings)
        self.metrics = self._make_metrics()

        # the tree, and the helpers that are never part of it
        self.subreaper = set_child_subreaper()
        self.reaper = Reaper()
        self.tree_marker = new_marker()  # NAME=value, put into the child's environment
        self.member_record = MemberRecord(record_path(state_dir), marker=self.tree_marker)
        self.hooks = HookRunner(settings.on_open_hook, cwd=settings.workspace, timeout=settings.hook_timeout,
                                on_spawn=self.reaper.leave_alone)  # run_hook waits for its own process
        self.keeper = SnapshotKeeper(settings, metrics=lambda: self.metrics)
        self.verify = VerifyService.create(settings, self.keeper.store,
                                           lambda judged, run: self.judge.verified_threadsafe(judged, run))
        if self.verify is not None:
            self.keeper.on_snapshot = self.verify.snapshot_taken
        self.tree = ProcessTree(os.getpid(), self.reaper)
        self.cgroup, no_cgroup = cgroup if cgroup is not None else LoopCgroup.create(state_dir)
        """The loop's own cgroup (process/cgroup.py), None where none can be made (the signals work alone)."""
        (log.info("cgroup_made", path=str(self.cgroup.path)) if self.cgroup is not None
         else log.info(events.CGROUP_UNAVAILABLE, reason=no_cgroup, fallback="the tree is paused and stopped by signals"))
        if self.cgroup is not None:
            self.metrics.follow_cgroup(self.cgroup.figures)
        self.verify_cgroup = self._make_verify_cgroup()
        self.report_writer = ReportWriter(state_dir)  # report.html at every open and at exit, off the loop
        self.actions = TreeActions(self.tree, grace=settings.grace, metrics=self.metrics,
                                   collect_exits=lambda: self.child.collect_exits(),
                                   extend_timeout=self.sd.extend_timeout, terminal=self.terminal,
                                   leader=lambda: self.child.pid)
        self.tree.freezer = self.cgroup  # the pause is its freeze (process/tree.py)

        # the evidence
        self.tracker = IterationTracker(settings.iteration_process, settings.iteration_marker, self.breaker.iteration)
        self.analysis = OutputAnalysis(self.loop, line_cap=settings.line_cap, marker=self.tracker.marker,
                                       deliver=lambda results: self.routing.output_analysed(results))
        self.child_log = child_log.open_log(state_dir, settings.log_max_bytes, settings.log_total_bytes,
                                            on_error=lambda exc: log.warning("child_log_unwritable", error=str(exc)))
        self.tap = OutputTap(self.child_log, self.analysis.queue, echo=self.terminal.echo,
                             tag=lambda: self.tracker.tag)
        self.tailer = Tailer(settings.workspace, settings.tail_globs(),
                             lambda source, data: self.routing.tailed(source, data))
        self.silence = SilenceMeter(time.time())
        self.loop_waits = LoopWaits(settings, self.warnings, lambda: self.metrics, self.notifier)
        """The usage ceiling and API outages (loop_waits.py): when they call for a freeze of the tree."""
        self.countdown = countdown_for(settings, self.terminal)
        self.workspace = Workspace(settings.workspace, state_dir=state_dir, ignore=settings.ignore,
                                   on_change=lambda change: self.routing.file_changed_threadsafe(change))
        self._ws_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ralph-workspace")
        """Iteration boundaries may block briefly (queued kernel events): one worker keeps them in order."""

        # the judgement and what it does to the tree
        self.keeping = Keeping(settings, breaker=self.breaker, records=self.records, warnings=self.warnings,
                               limit_until=lambda: self.episode.until,
                               escalation_text=lambda: self.applier.escalation_text)
        self.judge = CallJudge(settings, loop=self.loop, breaker=self.breaker, records=self.records,
                               warnings=self.warnings, keeper=self.keeper, verify=self.verify, cgroup=self.cgroup,
                               silence=self.silence, metrics=self.metrics, tailer=self.tailer, tap=self.tap,
                               analysis=self.analysis, loop_waits=self.loop_waits, lifecycle=self.life,
                               apply=lambda decision: self.applier.apply(decision),
                               apply_soon=lambda decision: self.applier.apply_soon(decision),
                               begin_wait=lambda wait, number: self.episode.begin(wait, number),
                               waiting=lambda: self.episode.until is not None, save=self.keeping.save,
                               tell_systemd=self._tell_systemd)
        # the calls: announced by the shims on PATH, or sampled from the tree (evidence/calls.py)
        self.calls = CallWatcher(self.tracker, self.workspace, self._ws_pool, settings.iteration_process,
                                 self.judge.hooks(marks=self.tap.marks))
        self.actions.calls = self.calls.gate
        self.child = self._make_child(run_dir)
        self.applier = Applier(settings, breaker=self.breaker, actions=self.actions, child=self.child,
                               cgroup=self.cgroup, records=self.records, warnings=self.warnings, keeper=self.keeper,
                               hooks=self.hooks, notifier=self.notifier, metrics=self.metrics,
                               report_writer=self.report_writer, silence=self.silence, lifecycle=self.life,
                               background=self.background, iteration=self._iteration,
                               recent_reports=lambda: self.judge.reports, save=self.keeping.save,
                               tell_systemd=self._tell_systemd)
        self.loop_end = LoopEnd(settings, breaker=self.breaker, tracker=self.tracker, notifier=self.notifier,
                                tap=self.tap, analysis=self.analysis, tree=self.tree, calls=self.calls,
                                verify=self.verify, keeper=self.keeper, child=self.child, lifecycle=self.life,
                                background=self.background, stop_tree=self.applier.stop_tree,
                                wait_over=lambda: self.episode.loop_exited())
        self.episode = WaitEpisode(settings, breaker=self.breaker, actions=self.actions, loop_waits=self.loop_waits,
                                   silence=self.silence, metrics=self.metrics, notifier=self.notifier,
                                   warnings=self.warnings, lifecycle=self.life,
                                   child_running=lambda: self.child.info is not None, iteration=self._iteration,
                                   apply=self.applier.apply, save=self.keeping.save, tell_systemd=self._tell_systemd)
        self.ticker = Ticker(settings, breaker=self.breaker, child=self.child, actions=self.actions, tree=self.tree,
                             calls=self.calls, tracker=self.tracker, tap=self.tap, tailer=self.tailer,
                             silence=self.silence, episode=self.episode, loop_waits=self.loop_waits,
                             keeper=self.keeper, member_record=self.member_record, countdown=self.countdown,
                             metrics=self.metrics, sd=self.sd, warnings=self.warnings,
                             keep_whole=self.keeping.keep_whole, destroying=self.judge.destroying,
                             apply=self.applier.apply, started_wall=self._started_wall)
        self.routing = Routing(loop=self.loop, tracker=self.tracker, calls=self.calls, loop_waits=self.loop_waits,
                               metrics=self.metrics, tap=self.tap, analysis=self.analysis, keeper=self.keeper,
                               silence=self.silence, lifecycle=self.life, wake=self.ticker.wake)
        self.commands = Commands(breaker=self.breaker, actions=self.actions, applier=self.applier,
                                 episode=self.episode, child=self.child, tree=self.tree, cgroup=self.cgroup,
                                 keeper=self.keeper, verify=self.verify, loop_waits=self.loop_waits,
                                 tracker=self.tracker, tap=self.tap, analysis=self.analysis, terminal=self.terminal,
                                 tree_size=lambda: self.ticker.tree_size)
        self.control: ControlServer | None = ControlServer(socket_path(state_dir), self.commands.handle)
        self.keeping.control = self.control

    # ------------------------------------------------------------------ building

    def _make_metrics(self) -> Any:
        settings = self.settings
        if settings.metrics_port is None and settings.metrics_textfile is None:
            return NullMetrics()
        from ralph_supervisor.metrics import Metrics  # prometheus_client only when asked for

        metrics = Metrics(str(settings.workspace), settings.name)
        metrics.follow(self._gauges)  # read at each scrape or textfile
        metrics.budgets(token=settings.token_budget, cost=settings.cost_budget,
                        daily_token=settings.daily_token_budget, daily_cost=settings.daily_cost_budget)
        return metrics

    def _make_verify_cgroup(self) -> LoopCgroup | None:
        """The verify's cgroup: the tree's bounds (--memory-max, ...) for the agent's tests too."""
        settings = self.settings
        limits = Limits(settings.memory_max, settings.cpu_max, settings.tasks_max)
        if self.verify is None or self.cgroup is None or not limits.any:
            return None
        made, why = LoopCgroup.create(settings.state_dir, limits, record=VERIFY_RECORD, role="verify")
        if made is not None:
            self.verify.verifier.enter = made.enter
            log.info("cgroup_made", path=str(made.path), role="verify")
        else:
            log.warning(events.CGROUP_UNAVAILABLE, reason=why, role="verify",
                        fallback="the verify runs without the tree's bounds")
        return made

    def _make_child(self, run_dir: Path | None) -> Child:
        """The loop's process, with the shims first on its PATH (in this run's private folder, neither in the
        workspace nor in the state folder) and, with `--sandbox bwrap`, in its box."""
        settings = self.settings
        env = child_environment(os.environ, tree_marker=self.tree_marker, state_dir=settings.state_dir)
        boxed = settings.sandbox == "bwrap"
        if run_dir is not None:
            env = self.calls.prepare(run_dir, env, boxed=boxed)
        if boxed:  # the box has PIDs of its own: the shims' notices name those
            self.calls.box_namespace = lambda: box_namespace(self.child.pid) if self.child.pid is not None else None
        self.box = box_for(settings, env, self.calls.shims, self.tree_marker.partition("=")[0], run_dir)
        """The loop's bubblewrap box (`--sandbox bwrap`), None without one."""
        return Child(settings, env=env, box=self.box, cgroup=self.cgroup, reaper=self.reaper, tap=self.tap,
                     calls=self.calls, actions=self.actions, metrics=self.metrics, lifecycle=self.life,
                     iteration=self._iteration, on_exit=lambda code: self.loop_end.child_exited(code))

    # ------------------------------------------------------------------ running

    async def run(self) -> int:
        settings, breaker = self.settings, self.breaker
        signals.install(self.loop, on_signal=self._on_signal, on_sigchld=self.child.on_sigchld)
        await asyncio.to_thread(self.workspace.start)
        if self.verify is not None:
            self.verify.start()
        self.keeper.start(breaker.iteration, lambda: self.workspace.ignored_prefixes)
        self.calls.start()
        try:
            await self.control.start()  # type: ignore[union-attr]
        except OSError as exc:
            log.warning(events.CONTROL_SOCKET_UNAVAILABLE, error=str(exc))
            self.control = self.keeping.control = None
        self._serve_metrics()
        log.info(events.SUPERVISOR_STARTED, pid=os.getpid(), workspace=str(settings.workspace),
                 state_dir=str(settings.state_dir), command=list(settings.command), subreaper=self.subreaper,
                 breaker=breaker.state.value, watcher=self.workspace.mode, **started_fields(settings))
        if self._state_warning:
            log.warning("state_file_corrupt", detail=self._state_warning)
        if breaker.state is State.OPEN or breaker.final:
            log.info(events.BREAKER_STILL_OPEN, trigger=breaker.trigger, reason=breaker.reason,
                     seconds_left=breaker.seconds_until_half_open(time.time()))
            if breaker.final:
                log.warning(events.BREAKER_FINAL, reason=breaker.reason)
                print(f"ralph-supervise: the breaker opened for good ({breaker.trigger}: {breaker.reason}); "
                      f"run `ralph-supervise reset -w {settings.workspace}` to start again", file=sys.stderr)
                self.life.finish(EXIT_FOR_GOOD)
        elif not (self.life.signals or self.life.exiting):  # a signal during start-up: never start the command
            self.child.spawn()
        self.keeping.save()
        self.keeping.guard_files()  # a file of ours deleted comes back
        self.sd.ready(self._sd_status())
        ticker = asyncio.create_task(self.ticker.run())
        code = await self.life.exit_code
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

    def _on_signal(self, signum: int) -> None:
        """The first SIGINT/SIGTERM stops the tree gracefully and exits 128+N; a second kills it at once."""
        self.life.signals += 1
        self.metrics.stop_lingering()  # a signal: no waiting for a last scrape
        code = 128 + signum
        if self.life.signals == 1:
            log.info("signal_received", signal=signal.Signals(signum).name, action="stop the tree gracefully")
            self.background.spawn(self._stop_and_exit(code))
        else:
            log.warning("signal_received", signal=signal.Signals(signum).name, action="kill the tree now")
            self.life.hurry = True
            self.actions.kill_now("second_signal", self.tracker.number)
            self.hooks.kill_all()
            self.life.finish(code)

    async def _stop_and_exit(self, code: int) -> None:
        await self.applier.stop_tree(events.STOP_SIGNAL)
        self.life.finish(code)

    async def _shutdown(self) -> None:
        """Stop what is left and close every part. After a second signal (`hurry`) nothing is waited for:
        no last call report, no last snapshot or report, no notice still on its way."""
        hurry, state_dir = self.life.hurry, self.settings.state_dir
        if self.countdown is not None:
            self.countdown.close()
        if self.tree.scan():
            await self.actions.stop("supervisor_exit", self.tracker.number)
        self.applier.kill_cgroup("supervisor_exit")
        wait_s = 0.0 if hurry else SHUTDOWN_WAIT_SECONDS
        try:  # the call a stop cut short is still reported
            await asyncio.wait_for(self.calls.finish_current(), max(0.01, wait_s))
        except (asyncio.TimeoutError, Exception) as exc:  # noqa: BLE001
            if not hurry:
                log.warning("call_reports_unfinished", error=repr(exc))
        self.calls.close()
        self.tap.detach_all()
        self.child.collect_exits()
        await self.background.settle(time.monotonic() + wait_s)
        await asyncio.to_thread(self.report_writer.close, 0.0 if hurry else 10.0)
        await asyncio.to_thread(self.keeper.close, self.tracker.number, last=not hurry)
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
        self.keeping.save()
        self.ticker.write_metrics_textfile(force=True)
        self.notifier.close(0.0 if hurry else 2.0)
        await asyncio.to_thread(self.metrics.close)  # after a final stop it waits for one more scrape
        self.sd.stopping()
        self._remove_cgroups()
        self.child_log.close()
        self.records.close()
        self.keeping.close()
        try:
            self.member_record.clear()
        except OSError as exc:
            self.warnings.once("tree_record_failed", error=str(exc))

    def _remove_cgroups(self) -> None:
        """What the loop used in all (for the report), then the cgroups go (a crash leaves them to the sweep)."""
        state_dir = self.settings.state_dir
        figures = self.cgroup.figures() if self.cgroup is not None else None
        if figures is not None:
            log.info(events.CGROUP_FIGURES, **figures.to_dict())
        if self.cgroup is not None and not self.cgroup.remove(state_dir):
            log.warning("cgroup_left", path=str(self.cgroup.path), hint="swept at the next start")
        if self.verify_cgroup is not None and not self.verify_cgroup.remove(state_dir, record=VERIFY_RECORD):
            log.warning("cgroup_left", path=str(self.verify_cgroup.path), hint="swept at the next start")

    # ------------------------------------------------------------------ small things the parts share

    def _iteration(self) -> int:
        return self.tracker.number

    def _sd_status(self) -> str:
        return status_text(self.breaker.state.value, self.tracker.number, self.breaker.trigger,
                           paused=self.actions.paused)

    def _tell_systemd(self) -> None:
        self.sd.status(self._sd_status())

    def _gauges(self) -> dict[str, Any]:
        """What the metrics read of the breaker at each scrape (their thread): the immutable snapshot last saved."""
        snapshot = self.keeping.published
        return {"state": snapshot.state.value, "final": snapshot.final, "iteration": snapshot.iteration}
