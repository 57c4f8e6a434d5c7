"""Start-up and the end of `run`, around the supervisor: what must happen before the event loop exists and
after it is gone.

Before: early signals are caught, the state folder is set up (outside the workspace; a `--worktree` run moves
into its new worktree first), the folder is locked (one supervisor per workspace), the registry learns of us
(`ls`), whatever a crashed supervisor left is swept (its tree, its cgroups), and the loop's cgroup is made (a
bound asked for and not possible is an error, never an unbounded run). After: `supervisor_stopped`, the last
`report.html`, the end said in the report's words, the registry marked ended, the lock released.

    >>> code = run_supervisor(settings)   # lock the folder, sweep leftovers, supervise, return run's exit code
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import structlog

from ralph_supervisor import events, files, masking, state_folder, worktree
from ralph_supervisor.container import proc_mount_problem
from ralph_supervisor.files import events_jsonl
from ralph_supervisor.files import lock as lock_file
from ralph_supervisor.files.lock import AlreadyRunning, InstanceLock
from ralph_supervisor.logging import colors_on, configure_logging, for_people
from ralph_supervisor.loop_command import terminal_only
from ralph_supervisor.memory import tune_allocator
from ralph_supervisor.process.cgroup import RECORD as CGROUP_RECORD
from ralph_supervisor.process.cgroup import CGROUP_OFF, VERIFY_RECORD, Limits, LoopCgroup
from ralph_supervisor.process.cgroup import sweep as sweep_cgroup
from ralph_supervisor.process.orphans import record_path, sweep_orphans
from ralph_supervisor.registry import register_supervisor
from ralph_supervisor.report import render_apart
from ralph_supervisor.report.ending import say_the_end
from ralph_supervisor.run_folder import RunFolder, RunFolderError
from ralph_supervisor.runtime import signals
from ralph_supervisor.settings import Settings
from ralph_supervisor.supervisor import Supervisor
from ralph_supervisor.terminal import Terminal

log = structlog.get_logger("ralph_supervisor")


def run_supervisor(settings: Settings) -> int:
    """Lock the state folder, sweep what a dead supervisor left, supervise, return the exit code."""
    signals.catch_early()
    problem = proc_mount_problem()  # a PID namespace without its own /proc: the "tree" would be the machine
    if problem:
        print(f"ralph-supervise: {problem}", file=sys.stderr)
        return 1
    needs_terminal = terminal_only(settings.command)
    if needs_terminal:
        print(f"ralph-supervise: warning: {needs_terminal}", file=sys.stderr)
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
    if needs_terminal:
        log.warning("loop_needs_terminal", note=needs_terminal)
    code, hurried = 1, False
    try:
        code, hurried = _sweep_and_supervise(settings, terminal)
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


def _sweep_and_supervise(settings: Settings, terminal: Terminal) -> tuple[int, bool]:
    """Sweep what a crashed supervisor left, make the loop's cgroup, supervise; the exit code, and whether a
    second signal asked to leave at once."""
    swept = sweep_orphans(record_path(settings.state_dir), grace=min(settings.grace, 2.0))
    (log.warning if swept else log.info)(events.ORPHANS_SWEPT, count=swept)
    for record in (CGROUP_RECORD, VERIFY_RECORD):  # the loop's and the verify's cgroups a crash left
        left = sweep_cgroup(settings.state_dir, record)
        if left is not None:
            log.warning("cgroup_swept", path=left)
    limits = Limits(settings.memory_max, settings.cpu_max, settings.tasks_max)
    cgroup = LoopCgroup.create(settings.state_dir, limits) if settings.cgroup == "auto" else (None, CGROUP_OFF)
    if cgroup[0] is None and limits.any:  # never unbounded when a bound was asked for
        print(f"ralph-supervise: {cgroup[1]}", file=sys.stderr)
        log.error(events.CGROUP_UNAVAILABLE, reason=cgroup[1])
        return 1, False
    return asyncio.run(_supervise(settings, terminal, cgroup))


async def _supervise(settings: Settings, terminal: Terminal,
                     cgroup: tuple[LoopCgroup | None, str | None] | None = None) -> tuple[int, bool]:
    """Supervise in this run's private folder (the shims); the exit code, and whether to leave at once."""
    try:
        run_dir: RunFolder | None = RunFolder.create()
    except RunFolderError as exc:
        log.warning(events.SHIMS_UNAVAILABLE, error=str(exc), fallback="agent calls are sampled from the tree")
        run_dir = None
    try:
        supervisor = Supervisor(settings, terminal, run_dir.path if run_dir is not None else None, cgroup)
        try:
            code = await supervisor.run()
        finally:
            supervisor.records.flush()  # what waited to be written (records.py), even after a failure
    finally:
        if run_dir is not None:
            run_dir.remove()
    return code, supervisor.life.hurry


def write_report_at_exit(state_dir: Path) -> None:
    """The last `report.html`, once `supervisor_stopped` is written (the event loop is gone: nothing waits)."""
    try:
        problem = render_apart(state_dir)
    except OSError as exc:  # the report is a courtesy; the exit code is not
        problem = f"cannot start the report's process: {exc.strerror or exc}"
    if problem is not None:
        log.warning(events.REPORT_UNWRITABLE, error=problem)
