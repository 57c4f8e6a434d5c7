"""The supervisor: the one place that wires the parts together.

One asyncio event loop reads the child's pipes, serves the control socket, handles signals and runs
a short tick that samples the tree, follows the agent's log files and asks the breaker what time
alone decides (cooldowns, stalls, trial bounds). Evidence flows up into `IterationReport`s; the
breaker (pure) answers with `Decision`s; this module applies them to the tree and to the disk.
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

from ralph_supervisor import store
from ralph_supervisor.breaker import Breaker, Decision, State, Thresholds
from ralph_supervisor.evidence.errors import error_lines_in_chunk
from ralph_supervisor.evidence.iterations import (
    CallEvidence,
    IterationTracker,
    OutputResult,
    build_report,
    is_agent_call,
    marker_pieces,
)
from ralph_supervisor.evidence.tail import Tailer
from ralph_supervisor.evidence.tap import AnalysisQueue, Chunk, OutputTap
from ralph_supervisor.logging import configure_logging
from ralph_supervisor.memory import release_free_memory, tune_allocator
from ralph_supervisor.process.linux import CLOCK_TICKS, ProcStat
from ralph_supervisor.process.tree import member_of, walk
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.rotating import RotatingFile
from ralph_supervisor.settings import Settings
from ralph_supervisor.signature import error_signature

log = structlog.get_logger("ralph_supervisor")

TICK_ACTIVE = 0.1
TICK_OUTPUT = 0.25
TICK_IDLE = 0.5
TICK_MIN = 0.02
CPU_ACTIVE_FRACTION = 0.01
CPU_WINDOW_SECONDS = 1.0
HISTORY_MAX_BYTES = 1_000_000
HISTORY_TOTAL_BYTES = 5_000_000
RECENT_REPORTS = 20
HANDOFF_MAX_BYTES = 2 << 20
SETTLE_SECONDS = 0.15
LEDGER_MAX_ATTEMPTS = 1000
SHUTDOWN_WAIT_SECONDS = 5.0
TRIM_EVERY = 100


def thresholds_from(settings: Settings) -> Thresholds:
    return Thresholds(
        no_progress=settings.no_progress,
        same_error=settings.same_error,
        output_decline=settings.output_decline,
        max_failures=settings.max_failures,
        stall_s=settings.stall,
        paraphrase=settings.paraphrase,
        max_iterations=settings.max_iterations,
        token_budget=settings.token_budget,
        daily_token_budget=settings.daily_token_budget,
        cooldown_s=settings.cooldown_s,
        max_opens=settings.max_opens,
    )


def load_breaker(settings: Settings) -> tuple[Breaker, str | None]:
    """The breaker as `state.json` left it; a corrupt file is moved aside and we start CLOSED."""
    path = settings.state_dir / store.STATE_FILE
    thresholds = thresholds_from(settings)
    try:
        data = store.read_json_object(path)
    except store.CorruptFile as exc:
        where = f"; moved to {exc.moved_to.name}" if exc.moved_to else ""
        return Breaker(thresholds), f"{exc}{where}; starting CLOSED"
    if data is None:
        return Breaker(thresholds), None
    try:
        restored = Breaker.from_dict(thresholds, data.get("breaker", data))
        # --token-budget is per run (CONTRACT 5); the daily budget is what spans runs.
        return Breaker(thresholds, dataclasses.replace(restored.snapshot(), tokens_used=0)), None
    except (ValueError, OverflowError, RecursionError, TypeError) as exc:
        moved = store.move_aside(path)
        where = f"; moved to {moved.name}" if moved else ""
        return Breaker(thresholds), f"{path}: {exc}{where}; starting CLOSED"


@dataclass
class ChildInfo:
    pid: int
    started_at: float
    popen: Any


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state_dir = settings.state_dir
        self.breaker, self._state_warning = load_breaker(settings)
        self.exit_code: asyncio.Future[int] | None = None
        self.child: ChildInfo | None = None
        self.reports: deque[IterationReport] = deque(maxlen=RECENT_REPORTS)
        self._signals = 0
        self._finishing: asyncio.Task[None] | None = None
        """The report of the call that just ended is being put together (late output, late file events)."""
        self._settle: asyncio.Event | None = None
        self._stopping_tree = False
        self._last_tree_size = 0
        self._cpu_seen: dict[tuple[int, int], int] = {}
        self._cpu_window_start = time.time()
        self._cpu_window_ticks = 0
        self._last_cpu_active = time.time()
        self._last_change = time.time()
        self._cmdlines: dict[tuple[int, int, str, tuple[int, int]], tuple[str, tuple[str, ...]]] = {}
        self._ledger: list[dict[str, Any]] = []
        self._background: set[asyncio.Task[Any]] = set()
        self._restart_pending = False
        self._paused = False
        self._started_wall = time.time()
        self._handed_over = 0  # bytes the analysis worker handed to the loop (written by the worker only)
        self._taken_over = 0  # bytes the loop took (written by the loop only)
        self._warned: set[str] = set()
        self._daily_fallback = 0
        """Today's tokens counted in memory while daily-spend.json cannot be written."""
        self._wake = asyncio.Event()
        self._tree_actions = asyncio.Lock()
        """One pause, resume, trial or stop at a time: interleaved, a resume could thaw a tree that a pause
        still froze, leaving it running while the supervisor believes it paused."""
        self._cut_short: set[tuple[int, float]] = set()
        """Agent calls that were running when we paused or stopped the tree: never a trial."""

    # ------------------------------------------------------------------ set-up and tear-down

    async def run(self) -> int:
        from ralph_supervisor.process.linux import set_child_subreaper
        from ralph_supervisor.process.reaper import Reaper
        from ralph_supervisor.process.tree import ProcessTree

        loop = asyncio.get_running_loop()
        self.loop = loop
        self.exit_code = loop.create_future()
        settings = self.settings
        self.subreaper = set_child_subreaper()
        self.reaper = Reaper()
        self._hook_pids: set[int] = set()
        from ralph_supervisor.process.orphans import MemberRecord, new_marker

        self._tree_marker = new_marker()  # NAME=value, put into the child's environment
        self._member_record = MemberRecord(self.state_dir / store.TREE_FILE, marker=self._tree_marker)
        self.tree = ProcessTree(os.getpid(), self.reaper, exclude=lambda pid: pid in self._hook_pids)
        self._install_signals()

        self.child_log = RotatingFile(self.state_dir / store.CHILD_LOG, settings.log_max_bytes, settings.log_total_bytes,
                                      on_error=lambda exc: log.warning("child_log_unwritable", error=str(exc)))
        self.history = RotatingFile(self.state_dir / store.HISTORY_FILE, HISTORY_MAX_BYTES, HISTORY_TOTAL_BYTES,
                                    whole_lines=True,
                                    on_error=lambda exc: log.warning("history_unwritable", error=str(exc)))
        marker = settings.iteration_marker
        self.tracker = IterationTracker(settings.iteration_process, marker, self.breaker.iteration)
        self.queue = AnalysisQueue(self._analyse, settings.line_cap, on_drop=self._output_dropped)
        echo = settings.echo if settings.echo is not None else _isatty(1)
        self.tap = OutputTap(self.child_log, self.queue, echo_fd=1 if echo else None, tag=lambda: self.tracker.tag)
        self.tailer = Tailer(settings.workspace, settings.tail_globs(), self._tailed)
        self._load_ledger()

        from ralph_supervisor.evidence.workspace import Workspace

        self.workspace = Workspace(settings.workspace, state_dir=self.state_dir, ignore=settings.ignore,
                                   on_change=self._file_changed_threadsafe)
        self._ws_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ralph-workspace")
        await asyncio.to_thread(self.workspace.start)

        from ralph_supervisor.control import ControlServer

        self.control = ControlServer(self.state_dir / store.CONTROL_SOCKET, self._handle_control)
        try:
            await self.control.start()
        except OSError as exc:
            log.warning("control_socket_unavailable", error=str(exc))
            self.control = None
        self._start_extras()

        log.info("supervisor_started", pid=os.getpid(), workspace=str(settings.workspace),
                 state_dir=str(self.state_dir), command=list(settings.command), subreaper=self.subreaper,
                 breaker=self.breaker.state.value, watcher=getattr(self.workspace, "mode", "?"))
        if self._state_warning:
            log.warning("state_file_corrupt", detail=self._state_warning)

        if self.breaker.state is State.OPEN or self.breaker.final:
            log.info("breaker_still_open", trigger=self.breaker.trigger, reason=self.breaker.reason,
                     seconds_left=self.breaker.seconds_until_half_open(time.time()))
            if self.breaker.final:
                log.warning("breaker_final", reason=self.breaker.reason)
                print(f"ralph-supervise: the breaker opened for good ({self.breaker.trigger}: {self.breaker.reason}); "
                      f"run `ralph-supervise reset -w {self.settings.workspace}` to start again", file=sys.stderr)
                self._finish(2)
        else:
            self._spawn()
        self._save_state()
        self.sd.ready(self._sd_status())

        ticker = asyncio.create_task(self._tick_loop())
        code = await self.exit_code
        ticker.cancel()
        await self._shutdown()
        return code

    def _start_extras(self) -> None:
        from ralph_supervisor.notify import Notifier
        from ralph_supervisor.sdnotify import SystemdNotifier

        settings = self.settings
        self.sd = SystemdNotifier()
        self.notifier = Notifier(webhook_url=settings.notify_webhook, desktop=settings.notify_desktop)
        self.metrics: Any = None
        if settings.metrics_port is not None or settings.metrics_textfile is not None:
            from ralph_supervisor.metrics import Metrics  # prometheus_client only when asked for

            self.metrics = Metrics(str(settings.workspace))
            if settings.metrics_port is not None:
                try:
                    port = self.metrics.serve(settings.metrics_port, settings.metrics_host)
                    log.info("metrics_listening", host=settings.metrics_host, port=port)
                except OSError as exc:
                    log.warning("metrics_unavailable", error=str(exc))
        self._last_textfile = 0.0

    def _install_signals(self) -> None:
        loop = self.loop
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        loop.add_signal_handler(signal.SIGINT, self._on_signal, signal.SIGINT)
        loop.add_signal_handler(signal.SIGTERM, self._on_signal, signal.SIGTERM)
        loop.add_signal_handler(signal.SIGCHLD, self._on_sigchld)

    async def _shutdown(self) -> None:
        if self.tree.scan():
            await self._stop_tree("supervisor_exit")
        self.tap.detach_all()
        self._on_sigchld()
        deadline = time.monotonic() + SHUTDOWN_WAIT_SECONDS
        for task in list(self._background):
            try:
                await asyncio.wait_for(asyncio.shield(task), max(0.1, deadline - time.monotonic()))
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001
                pass
        self._kill_hooks()  # a hook still running when we leave is cut off (its runner thread then returns)
        if self.control is not None:
            await self.control.close()
        self._ws_pool.shutdown(wait=True)
        await asyncio.to_thread(self.workspace.stop)
        await asyncio.to_thread(self.queue.close)  # never block the loop: the worker may be handing off to it
        self._save_state()
        self._write_metrics_textfile(force=True)
        self.notifier.close()
        if self.metrics is not None:
            self.metrics.close()
        self.sd.stopping()
        self.child_log.close()
        self.history.close()
        try:
            self._member_record.clear()
        except OSError as exc:
            self._warn_once("tree_record_failed", error=str(exc))

    def _finish(self, code: int) -> None:
        if self.exit_code is not None and not self.exit_code.done():
            self.exit_code.set_result(code)

    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_log_task_error)

    # ------------------------------------------------------------------ the child

    def _spawn(self) -> None:
        from ralph_supervisor.process.spawn import spawn

        settings = self.settings
        from ralph_supervisor.sdnotify import environment_for_child

        env = dict(environment_for_child(os.environ))
        env["RALPH_SUPERVISE"] = "1"
        name, _, value = self._tree_marker.partition("=")
        env[name] = value  # lets a successor find orphans started after the last record
        env["RALPH_SUPERVISE_STATE_DIR"] = str(self.state_dir)
        try:
            popen = spawn(list(settings.command), settings.workspace, env)
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
        self.child = ChildInfo(popen.pid, time.time(), popen)
        self._paused = False
        log.info("child_started", pid=popen.pid, command=list(settings.command))
        if self.metrics is not None:
            self.metrics.child_running(True)

    def _on_sigchld(self) -> None:
        codes = self.reaper.reap()
        child = self.child
        if child is not None and child.pid in codes:
            self._child_exited(codes[child.pid])

    def _child_exited(self, code: int) -> None:
        child, self.child = self.child, None
        assert child is not None
        log.info("child_exited", pid=child.pid, code=code, iteration=self.tracker.number)
        if self.metrics is not None:
            self.metrics.child_running(False)
        if self._stopping_tree or self._restart_pending:
            return
        self._send_notice_child_exit(code)
        self._spawn_task(self._child_ended_by_itself(code))

    async def _child_ended_by_itself(self, code: int) -> None:
        """The loop ended on its own: finish the call in progress, clear the rest of the tree, exit with its code."""
        try:
            await self.tap.wait_closed(timeout=1.0)
            # The last output may still be in analysis: in marker mode it can start the very call to finish.
            await asyncio.to_thread(self.queue.wait_done, self.tap.last_seq, 5.0)
            if self.tree.scan():
                await self._stop_tree("child_exited")
            if self._finishing is not None:
                await asyncio.shield(self._finishing)
            await self._finish_call(self.tracker.current)
        finally:
            self._finish(code)  # whatever went wrong in the bookkeeping, the child's code is the answer

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        code = 128 + signum
        if self._signals == 1:
            log.info("signal_received", signal=signal.Signals(signum).name, action="stop the tree gracefully")
            self._spawn_task(self._stop_and_exit(code, "signal"))
        else:
            log.warning("signal_received", signal=signal.Signals(signum).name, action="kill the tree now")
            result = self.tree.kill_now()
            self._log_tree_stopped(result, "second_signal")
            self._kill_hooks()
            self._finish(code)

    async def _stop_and_exit(self, code: int, why: str) -> None:
        await self._stop_tree(why)
        self._finish(code)

    async def _stop_tree(self, why: str) -> None:
        """TERM, grace, KILL, re-scan: the whole tree, and log `tree_stopped`."""
        self._mark_calls_cut_short()
        self._stopping_tree = True
        try:
            grace = self.settings.grace
            self.sd.extend_timeout(grace + 10)
            result = await asyncio.to_thread(self.tree.stop, grace)
            self._on_sigchld()
            self._log_tree_stopped(result, why)
            self._paused = False
            if self.child is not None and self.reaper.exit_code(self.child.pid) is not None:
                self.child = None
        finally:
            self._stopping_tree = False

    def _kill_hooks(self) -> None:
        """SIGKILL the process group of every hook still running (hooks lead their own group)."""
        for pid in list(self._hook_pids):
            try:
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
            except OSError:
                self._hook_pids.discard(pid)

    def _log_tree_stopped(self, result: Any, why: str) -> None:
        survivors = [m.pid for m in result.survivors]
        (log.warning if survivors else log.info)(
            "tree_stopped", reason=why, survivors=len(survivors), survivor_pids=survivors,
            duration_ms=result.duration_ms, signalled=result.signalled, iteration=self.tracker.number)
        if self.metrics is not None:
            self.metrics.tree_stopped(len(survivors))
            self.metrics.child_running(False)

    # ------------------------------------------------------------------ output and evidence

    def _analyse(self, chunk: Chunk, lines: bytes | None) -> None:
        """Worker thread: decode, cut at markers, filter errors; hand the findings to the event loop."""
        # One decode per chunk (a line holds no b"\n", so this equals decoding line by line).
        text = lines.decode("utf-8", "replace") if lines is not None else None
        marker = self.tracker.marker
        if lines is None or text is None:
            results = [_unread(chunk)]
        else:
            pieces = marker_pieces(lines, text, marker) if marker is not None else [(lines, text, False)]
            results = []
            rest = len(chunk.data)
            for index, (raw, piece_text, starts) in enumerate(pieces):
                # Bytes apportioned by lines; the last piece takes the rest, so the chunk's total stays exact.
                nbytes = rest if index == len(pieces) - 1 else min(rest, len(raw) + 1)
                rest -= nbytes
                results.append(OutputResult(chunk.source, nbytes, chunk.tag, chunk.read_at, piece_text,
                                            tuple(error_lines_in_chunk(raw)), starts))
        # Bound what waits for the event loop: the worker (never the reader) waits when the loop is behind.
        # Two counters, each written by one thread only, so no update is lost between them.
        patience = time.monotonic() + 2.0
        while (self._handed_over - self._taken_over > HANDOFF_MAX_BYTES and not self.loop.is_closed()
               and not self.queue.closed and time.monotonic() < patience):
            time.sleep(0.005)
        self._handed_over += len(chunk.data)
        try:
            self.loop.call_soon_threadsafe(self._output_analysed, results)
        except RuntimeError:
            pass

    def _output_dropped(self, chunk: Chunk) -> None:
        """The analysis fell behind and skipped this chunk: its bytes still belong to their iteration."""
        self._route_output(_unread(chunk))

    def _output_analysed(self, results: list[OutputResult]) -> None:
        for result in results:
            self._taken_over += result.nbytes
            self._route_output(result)

    def _route_output(self, result: OutputResult) -> None:
        if self.tracker.marker is None:
            self.tracker.add_output(result, time.time())
            if self.tracker.current is None:
                self._wake.set()  # output while no call is known: a short call may be running, sample now
        else:
            if result.starts and not self._exiting():
                now = time.time()
                ended = self.tracker.finish()
                if ended is not None:
                    delta = self._ws_pool.submit(self.workspace.end_iteration)
                    self._spawn_task(self._report_call(ended, now, delta))
                self._begin_call(now)
            self.tracker.add_output(result, time.time())
        if self.metrics is not None:
            self.metrics.add_output_bytes(result.nbytes)

    def _tailed(self, source: str, data: bytes) -> None:
        self.tap.counters.last_output_at = time.monotonic()
        self.tap.last_seq = self.queue.submit(Chunk(source, data, self.tracker.tag, time.time()))

    def _file_changed_threadsafe(self, change: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self._file_changed)
        except RuntimeError:
            pass

    def _file_changed(self) -> None:
        self._last_change = time.time()

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
        while a long call runs: its end can wait a moment, and a stall is judged in minutes."""
        call = self.tracker.current
        output = now - self.tap.counters.last_output_at < 2
        if call is None:
            return TICK_ACTIVE if output else TICK_IDLE
        if now - call.started_at < 2:
            return TICK_ACTIVE
        return TICK_OUTPUT if output else TICK_IDLE

    async def _tick(self) -> None:
        now = time.time()
        self._on_sigchld()
        self.tailer.poll()
        stats = self.tree.sample() if not self._stopping_tree else []
        members = [member_of(stat) for stat in stats]
        self._record_members(members)
        if self.tracker.marker is None and not self._stopping_tree:
            await self._track_agent_calls(stats, now)
        silent_since = self._silent_since(stats, now)
        decision = self.breaker.tick(now, silent_since=silent_since)
        if decision.changed:
            await self._apply(decision)
        self.sd.maybe_watchdog(time.monotonic())
        self._write_metrics_textfile()

    def _record_members(self, members: list[Any]) -> None:
        """Keep `tree.json` current (cheap when unchanged) so a successor can sweep what we leave."""
        size = len(members)
        if size != self._last_tree_size:
            self._last_tree_size = size
            if self.metrics is not None:
                self.metrics.tree_size(size)
        try:
            self._member_record.record(members)
        except OSError as exc:
            self._warn_once("tree_record_failed", error=str(exc))

    def _identity(self, stat: ProcStat) -> tuple[str, tuple[str, ...]]:
        """Name and command line, cached per process image. The name alone does not tell an exec: a pyenv
        `python3` shim (bash) execs python3 under the same name, so the key holds where the code is mapped."""
        key = (stat.pid, stat.start_ticks, stat.name, stat.code)
        known = self._cmdlines.get(key)
        if known is None:
            try:
                with open(f"/proc/{stat.pid}/cmdline", "rb") as fh:
                    raw = fh.read(65536)
                cmdline = tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)
            except OSError:
                cmdline = ()
            known = self._cmdlines[key] = (stat.name, cmdline)
            if len(self._cmdlines) > 4096:
                self._cmdlines.clear()
        return known

    async def _track_agent_calls(self, stats: list[ProcStat], now: float) -> None:
        call = self.tracker.current
        live = {(s.pid, s.create_time) for s in stats}
        if call is not None and call.pid is not None:
            if (call.pid, call.create_time) not in live:
                self._finishing = asyncio.ensure_future(self._finish_call(call))
                self._background.add(self._finishing)
                self._finishing.add_done_callback(self._background.discard)
                self._finishing.add_done_callback(_log_task_error)
            return
        if self._paused:
            return
        candidates = [(s.pid, s.create_time, *self._identity(s)) for s in stats]
        found = self.tracker.new_call_candidate(candidates)
        if found is not None:
            if self._finishing is not None and not self._finishing.done():
                # A new call began: the previous one's report cannot wait for stragglers any longer.
                if self._settle is not None:
                    self._settle.set()
                await asyncio.shield(self._finishing)
            pid, ctime = found
            self.tracker.ignore_process(pid, ctime)
            name, argv = next((ident for p, c, *ident in candidates if (p, c) == (pid, ctime)), ("", ()))
            self._begin_call(now, pid, ctime, name, argv)

    def _begin_call(self, now: float, pid: int | None = None, create_time: float | None = None,
                    name: str = "", argv: tuple[str, ...] = ()) -> CallEvidence:
        call = self.tracker.start(time.monotonic(), now, pid, create_time, name, argv)
        if pid is not None and (pid, create_time) in self._cut_short:
            call.cut_short = True
        # Iteration boundaries may block briefly (queued kernel events): one worker keeps them in order.
        self._ws_pool.submit(self.workspace.begin_iteration)
        self._last_cpu_active = now
        log.info("iteration_started", iteration=call.number, pid=pid)
        if self.metrics is not None:
            self.metrics.iteration_started(now=now)
        self.sd.status(self._sd_status())
        decision = self.breaker.iteration_started(call.number, now)
        self._save_state()
        if decision.changed:
            self._spawn_task(self._apply(decision))
        return call

    def _silent_since(self, stats: list[Any], now: float) -> float | None:
        """Since when the current call (or, in marker mode, the tree) has been silent on every channel:
        no output, no file change, and under 1 % of one core of CPU (judged over windows of a second)."""
        if self._paused or not stats:
            return None
        call = self.tracker.current
        if self.tracker.marker is None:
            if call is None or call.pid is None:
                return None
            watched = walk(stats, [call.pid], include_roots=True)
        else:
            watched = stats
        ticks = 0
        seen: dict[tuple[int, int], int] = {}
        for stat in watched:
            key = (stat.pid, stat.start_ticks)
            seen[key] = stat.cpu_ticks
            ticks += max(0, stat.cpu_ticks - self._cpu_seen.get(key, stat.cpu_ticks))
        self._cpu_seen = seen
        self._cpu_window_ticks += ticks
        window = now - self._cpu_window_start
        if window >= CPU_WINDOW_SECONDS:
            if self._cpu_window_ticks / CLOCK_TICKS / window >= CPU_ACTIVE_FRACTION:
                self._last_cpu_active = now
            self._cpu_window_start, self._cpu_window_ticks = now, 0
        last_output = time.time() - (time.monotonic() - self.tap.counters.last_output_at)
        start = call.started_wall if call is not None else self._started_wall
        return max(start, last_output, self._last_change, self._last_cpu_active)

    async def _finish_call(self, call: CallEvidence | None) -> None:
        """The call ended: wait for its last output and file events (briefly), then report it."""
        if call is None:
            return
        ended = time.time()
        self.tailer.poll()  # the call's last words in its log file still belong to it
        self.tracker.finish()
        await asyncio.to_thread(self.queue.wait_done, self.tap.last_seq, 5.0)
        self._settle = settle = asyncio.Event()
        try:
            await asyncio.wait_for(settle.wait(), SETTLE_SECONDS)  # the watcher's events trail the writes
        except asyncio.TimeoutError:
            pass
        await self._report_call(call, ended)

    def _exiting(self) -> bool:
        """The exit code is decided: no new iteration may begin."""
        return self.exit_code is None or self.exit_code.done()

    async def _report_call(self, call: CallEvidence, ended: float,
                           delta_future: concurrent.futures.Future[Any] | None = None) -> None:
        from ralph_supervisor.evidence.replies import parse_agent_output

        if delta_future is None:
            delta_future = self._ws_pool.submit(self.workspace.end_iteration)
        delta = await asyncio.wrap_future(delta_future)
        agent = parse_agent_output(call.output_text()) if call.text else None
        signatures = frozenset(error_signature(line) for line in call.error_lines)
        report = build_report(call, ended_at=ended, files_changed=delta.files_changed, changed_paths=delta.paths,
                              commits=delta.commits, agent=agent, signatures=signatures)
        self.tracker.release(call.number)
        await self._observe(report, ended)

    async def _observe(self, report: IterationReport, now: float) -> None:
        self.reports.append(report)
        daily = self._daily_tokens(report.tokens or 0, now)
        outcome = outcome_of(report)
        log.info("iteration_finished", iteration=report.number, files_changed=report.files_changed,
                 commits=report.commits, output_bytes=report.output_bytes, errors=len(report.error_signatures),
                 tokens=report.tokens, outcome=outcome, failed=report.failed, usage_limited=report.usage_limited,
                 blocked=report.blocked, cut_short=report.cut_short,
                 duration_s=round(report.ended_at - report.started_at, 3))
        if self.metrics is not None:
            self.metrics.iteration_finished(files_changed=report.files_changed, output_bytes=0, tokens=report.tokens or 0)
        self._append_ledger(report, outcome)
        if report.number % TRIM_EVERY == 0:
            release_free_memory()
        decision = self.breaker.observe(report, now, daily_tokens_today=daily)
        if decision.changed:
            await self._apply(decision)
        else:
            self._save_state()

    # ------------------------------------------------------------------ decisions

    async def _apply(self, decision: Decision) -> None:
        """Carry out what the breaker decided, and leave a record of it."""
        async with self._tree_actions:
            await self._carry_out(decision)

    async def _carry_out(self, decision: Decision) -> None:
        # history.jsonl first, then state.json: whoever sees the new state finds its transition already written.
        self._record_transition(decision)
        self._save_state()
        action = decision.action
        if action in ("open", "final"):
            self._write_escalation(decision)
            if decision.final or self.settings.on_open == "stop" or decision.trigger == "blocked":
                await self._stop_tree("breaker_final")
                self._finish(2)
            elif self.settings.on_open == "kill":
                self._restart_pending = True
                await self._stop_tree("breaker_open")
            else:
                await self._pause_tree()
            self._run_hook(decision)  # after the tree action, so the hook is never frozen or stopped with it
        elif action == "half_open":
            await self._start_trial()
        self._save_state()

    def _mark_calls_cut_short(self) -> None:
        """The calls running now are interrupted by us: their iterations are neutral, never the trial."""
        if self.tracker.current is not None:
            self.tracker.current.cut_short = True
        if self.tracker.marker is None:
            for stat in self.tree.sample():
                name, cmdline = self._identity(stat)
                if is_agent_call(name, cmdline, self.tracker.agent_names):
                    self._cut_short.add((stat.pid, stat.create_time))
            if len(self._cut_short) > 1024:
                self._cut_short.clear()

    async def _pause_tree(self) -> None:
        self._mark_calls_cut_short()
        started = time.monotonic()
        count = await asyncio.to_thread(self.tree.pause)
        self._paused = True
        log.info("tree_paused", processes=count, iteration=self.tracker.number,
                 duration_ms=int((time.monotonic() - started) * 1000))

    async def _resume_tree(self) -> None:
        count = await asyncio.to_thread(self.tree.resume)
        self._paused = False
        log.info("tree_resumed", processes=count, iteration=self.tracker.number)

    async def _start_trial(self) -> None:
        """HALF_OPEN: thaw the tree (pause mode) or start the command again (kill mode, or after a restart)."""
        self._last_cpu_active = time.time()
        self._last_change = time.time()
        if self._paused:
            await self._resume_tree()
        elif self.child is None and self.exit_code is not None and not self.exit_code.done():
            self._restart_pending = False
            self._spawn()

    def _record_transition(self, decision: Decision) -> None:
        entry = {
            "ts": store.iso_utc(),
            "iteration": decision.iteration,
            "from": decision.from_state.value,
            "to": decision.state.value,
            "trigger": decision.trigger,
            "reason": decision.reason,
        }
        self.history.write((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))
        log.info("breaker_transition", **{k: v for k, v in entry.items() if k != "ts"}, final=decision.final)
        if self.metrics is not None:
            self.metrics.breaker_state(decision.state.value)
            if decision.state is State.OPEN:
                self.metrics.breaker_opened(decision.trigger)
        self.sd.status(self._sd_status())
        from ralph_supervisor.notify import notice_for_transition

        notice = notice_for_transition(from_state=decision.from_state.value, to_state=decision.state.value,
                                       trigger=decision.trigger, reason=decision.reason,
                                       iteration=decision.iteration, workspace=str(self.settings.workspace),
                                       final=decision.final)
        if notice is not None:
            self.notifier.send(notice)

    def _send_notice_child_exit(self, code: int) -> None:
        from ralph_supervisor.notify import notice_for_child_exit

        self.notifier.send(notice_for_child_exit(code=code, workspace=str(self.settings.workspace),
                                                 state=self.breaker.state.value, trigger=self.breaker.trigger,
                                                 iteration=self.tracker.number))

    def _write_escalation(self, decision: Decision) -> None:
        from ralph_supervisor.escalation import render_escalation

        history = _read_history_tail(self.state_dir / store.HISTORY_FILE, 21)[:-1]  # before this open
        summary = {
            "workspace": str(self.settings.workspace),
            "command": " ".join(self.settings.command),
            "on_open": self.settings.on_open,
            "state_dir": str(self.state_dir),
        }
        try:
            text = render_escalation(decision, list(self.reports), history, summary, store.iso_utc())
            store.atomic_write_text(self.state_dir / store.ESCALATION_FILE, text)
        except Exception as exc:  # noqa: BLE001 - the summary is a courtesy; the stop is not
            self._warn_once("escalation_unwritable", error=str(exc))

    def _run_hook(self, decision: Decision) -> None:
        cmd = self.settings.on_open_hook
        if not cmd:
            return
        from ralph_supervisor.notify import run_hook

        payload = json.dumps({**decision.to_dict(), "workspace": str(self.settings.workspace),
                              "state_dir": str(self.state_dir)})

        def spawned(popen: Any) -> None:
            self._hook_pids.add(popen.pid)  # not part of the supervised tree
            self.reaper.leave_alone(popen.pid)  # run_hook waits for it itself

        async def go() -> None:
            result = await asyncio.to_thread(run_hook, cmd, payload, cwd=self.settings.workspace,
                                             timeout=self.settings.hook_timeout, on_spawn=spawned)
            if not result.ok:
                log.warning("hook_failed", command=cmd, code=result.code, timed_out=result.timed_out,
                            stderr=result.stderr_tail, iteration=decision.iteration)

        self._spawn_task(go())

    # ------------------------------------------------------------------ control socket

    async def _handle_control(self, request: dict[str, Any]) -> dict[str, Any]:
        from ralph_supervisor.control import ControlError

        cmd = request.get("cmd")
        now = time.time()
        if cmd == "status":
            return self.status()
        if cmd in ("pause", "resume", "reset", "stop"):
            async with self._tree_actions:
                return await self._tree_command(cmd, now)
        raise ControlError(f"unknown command {cmd!r}")

    async def _tree_command(self, cmd: str, now: float) -> dict[str, Any]:
        if cmd == "pause":
            if self._paused:
                return {"message": "the tree is already paused", **self.status()}
            decision = self.breaker.manual_open("paused by request (ralph-supervise pause)", now)
            self._record_transition(decision)
            await self._pause_tree()
            self._save_state()
            return {"message": f"paused {self._last_tree_size} processes", **self.status()}
        if cmd in ("resume", "reset"):
            decision = self.breaker.resume(now) if cmd == "resume" else self.breaker.reset()
            if decision.changed:
                self._record_transition(decision)
            await self._start_trial()  # thaw the tree, or start the command again
            self._save_state()
            message = "resumed: the next iteration is the trial" if cmd == "resume" else "breaker reset to CLOSED"
            return {"message": message, **self.status()}
        await self._stop_tree("stop_request")
        self._finish(0)
        return {"message": "the tree is stopped; the supervisor exits"}

    def status(self) -> dict[str, Any]:
        """CONTRACT section 3, plus the live extras the `watch` view shows."""
        data = self.breaker.status()
        snapshot = self.breaker.to_dict()
        for key in ("final", "opened_at", "cooldown_s"):  # for the live view's countdown
            data[key] = snapshot.get(key)
        members = self.tree.sample() if hasattr(self, "tree") else []
        child = self.child
        data["supervisor"] = {"pid": os.getpid(), "running": True}
        data["child"] = None if child is None else {
            "pid": child.pid, "running": True, "paused": self._paused, "processes": len(members)}
        call = self.tracker.current
        if call is not None:
            data["current"] = {"iteration": call.number, "started_at": store.iso_utc(call.started_wall),
                               "age_s": round(time.time() - call.started_wall, 1)}
        data["tree"] = [{"pid": stat.pid, "name": stat.name, "status": stat.state,
                         "cpu_s": round(stat.cpu_ticks / CLOCK_TICKS, 2)} for stat in members[:50]]
        data["tap"] = {"bytes_read": self.tap.counters.bytes_read,
                       "analysis_dropped_bytes": self.queue.dropped_bytes,
                       "analysis_lag_bytes": self.queue.lag_bytes,
                       "cut_lines": self.queue.cut_lines()}
        return data

    # ------------------------------------------------------------------ files

    def _save_state(self) -> None:
        data = self.breaker.to_dict()
        data["updated_at"] = store.iso_utc()
        data["supervisor_pid"] = os.getpid()
        try:
            store.atomic_write_json(self.state_dir / store.STATE_FILE, data)
        except OSError as exc:
            self._warn_once("state_unwritable", error=str(exc))

    def _daily_tokens(self, tokens: int, now: float) -> int:
        """Today's tokens across runs, this iteration's added once. A full disk costs the record, not the judging."""
        path = self.state_dir / store.DAILY_FILE
        try:
            if tokens:
                return store.add_daily_spend(path, tokens, now).tokens
            return store.load_daily_spend(path, now)[0].tokens
        except OSError as exc:
            self._warn_once("daily_spend_unwritable", error=str(exc))
            self._daily_fallback += tokens
            return self._daily_fallback

    def _warn_once(self, event: str, **fields: Any) -> None:
        """One warning per kind of trouble (a full disk would otherwise say so every iteration)."""
        if event not in self._warned:
            self._warned.add(event)
            log.warning(event, **fields)

    def _load_ledger(self) -> None:
        try:
            data = store.read_json_object(self.state_dir / store.LEDGER_FILE)
        except store.CorruptFile as exc:
            log.warning("ledger_corrupt", detail=str(exc))
            data = None
        attempts = data.get("attempts") if data else None
        self._ledger = [a for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else []

    def _append_ledger(self, report: IterationReport, outcome: str) -> None:
        from ralph_supervisor.ledger import attempt_dict, dump_ledger

        self._ledger.append(attempt_dict(report.number, action_summary(report), outcome,
                                         report.first_error or None, report.tokens or 0))
        del self._ledger[:-LEDGER_MAX_ATTEMPTS]  # bounded: the rules judge the recent tail
        goal = f"supervised: {' '.join(self.settings.command)}"[:200]
        try:
            store.atomic_write_text(self.state_dir / store.LEDGER_FILE, dump_ledger(goal, self._ledger))
        except OSError as exc:
            self._warn_once("ledger_unwritable", error=str(exc))

    def _sd_status(self) -> str:
        from ralph_supervisor.sdnotify import status_text

        return status_text(self.breaker.state.value, self.tracker.number if hasattr(self, "tracker") else 0,
                           self.breaker.trigger, paused=getattr(self, "_paused", False))

    def _write_metrics_textfile(self, force: bool = False) -> None:
        path = self.settings.metrics_textfile
        if path is None or self.metrics is None:
            return
        now = time.monotonic()
        if force or now - self._last_textfile >= 10:
            self._last_textfile = now
            try:
                self.metrics.write_textfile(path)
            except OSError as exc:
                log.warning("metrics_textfile_unwritable", error=str(exc))


def _unread(chunk: Chunk) -> OutputResult:
    """A chunk's findings when none of its lines were read: its bytes, source and time, no text."""
    return OutputResult(chunk.source, len(chunk.data), chunk.tag, chunk.read_at, None, ())


def outcome_of(report: IterationReport) -> str:
    """The ledger's outcome: success (progress), failure (a failed call or an error), noop (neither)."""
    if report.progress:
        return "success"
    if report.failed or report.blocked or report.error_signatures:
        return "failure"
    return "noop"


def action_summary(report: IterationReport) -> str:
    """A short summary of what the agent said it did (its reply's first line, or what happened)."""
    if report.usage_limited:
        return "usage limit reached"
    if report.blocked:
        return f"blocked: {report.blocked_reason}"[:200]
    if report.reply:
        for line in report.reply.splitlines():
            if line.strip():
                return line.strip()[:200]
    if report.failed:
        return "failed call"
    return "no reply"


def _read_history_tail(path: Path, count: int) -> list[dict[str, Any]]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            lines = fh.read().splitlines()[-count:]
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _log_task_error(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("supervisor_task_failed", error=repr(exc))


def run_supervisor(settings: Settings) -> int:
    """Lock the state folder, sweep what a dead supervisor left, supervise, return the exit code."""
    try:
        store.prepare_state_dir(settings.state_dir)
    except OSError as exc:
        print(f"ralph-supervise: --state-dir: cannot create {settings.state_dir}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    lock = store.InstanceLock(settings.state_dir / store.LOCK_FILE)
    try:
        lock.acquire()
    except store.AlreadyRunning as exc:
        print(f"ralph-supervise: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"ralph-supervise: cannot lock {lock.path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    # The reader (event loop) and the analysis thread share the GIL: with the default 5 ms switch interval
    # every os.read/os.write of the reader may wait 5 ms for a busy analysis thread to let go of it.
    sys.setswitchinterval(0.0005)
    tune_allocator()
    events = configure_logging(settings.state_dir / store.EVENTS_FILE, settings.log_format)
    code = 1
    try:
        from ralph_supervisor.process.orphans import sweep_orphans

        swept = sweep_orphans(settings.state_dir / store.TREE_FILE, grace=min(settings.grace, 2.0))
        if swept:
            log.warning("orphans_swept", count=swept)
        else:
            log.info("orphans_swept", count=0)
        supervisor = Supervisor(settings)
        code = asyncio.run(supervisor.run())
    except Exception as exc:  # noqa: BLE001 - one clear line, exit 1
        log.exception("supervisor_failed", error=str(exc))
        print(f"ralph-supervise: internal error: {exc}", file=sys.stderr)
        code = 1
    finally:
        log.info("supervisor_stopped", code=code)
        if events is not None:
            events.close()
        lock.release()
    return code
