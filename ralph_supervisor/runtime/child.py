"""The loop's own process: started with the shims on its PATH (in its box and cgroup where it has them), its
pipes handed to the output tap, its exit collected.

We are its parent (and the subreaper of everything below it), so its exit code is ours to read: `collect_exits`
runs at every SIGCHLD and tick. An exit during a stop, or before a restart, is ours; any other is the loop
ending by itself, which `on_exit` hears of.

    >>> child = Child(settings, env=env, box=None, cgroup=None, reaper=reaper, tap=tap, calls=calls,
    ...               actions=actions, metrics=metrics, lifecycle=life,
    ...               iteration=lambda: tracker.number, on_exit=loop_ended)   # doctest: +SKIP
    >>> child.spawn()                                                                        # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from ralph_supervisor import events
from ralph_supervisor.process.reaper import Reaper
from ralph_supervisor.process.spawn import loop_stdin, spawn
from ralph_supervisor.runtime.lifecycle import Lifecycle
from ralph_supervisor.sdnotify import environment_for_child

log = structlog.get_logger("ralph_supervisor")


def child_environment(environ: Mapping[str, str], *, tree_marker: str, state_dir: Path) -> dict[str, str]:
    """The loop's environment: ours (less what is systemd's), and what lets it and a successor know it is
    supervised. `tree_marker` (NAME=value) lets a successor find orphans started after the last record."""
    env = dict(environment_for_child(environ))
    env["RALPH_SUPERVISE"] = "1"
    name, _, value = tree_marker.partition("=")
    env[name] = value
    env["RALPH_SUPERVISE_STATE_DIR"] = str(state_dir)
    return env


HELPER_WAIT_S = 0.03
"""After a SIGCHLD that found a helper's exit first: when to reap what may lie behind it."""


@dataclass(frozen=True)
class ChildInfo:
    pid: int
    started_at: float
    popen: Any


class Child:
    """The loop's process, one at a time (a restart after `--on-open kill` starts a new one). Event loop only."""

    def __init__(self, settings: Any, *, env: dict[str, str], box: Any, cgroup: Any, reaper: Reaper, tap: Any,
                 calls: Any, actions: Any, metrics: Any, lifecycle: Lifecycle, iteration: Callable[[], int],
                 on_exit: Callable[[int], None]) -> None:
        self._settings = settings
        self._env = env
        self._box = box
        self._cgroup = cgroup
        self._reaper = reaper
        self._tap = tap
        self._calls = calls
        self._actions = actions
        self._metrics = metrics
        self._life = lifecycle
        self._iteration = iteration
        self._on_exit = on_exit
        self.info: ChildInfo | None = None
        self.restart_pending = False
        """The tree is being stopped to start the command again (`--on-open kill`): its exit is ours."""
        self.ended_by_itself = False
        """The loop ended on its own: nothing starts it again (a verdict still coming in opens, no more)."""
        self._look_again_due = False

    @property
    def pid(self) -> int | None:
        return self.info.pid if self.info is not None else None

    def spawn(self) -> None:
        """Start the command; a command that cannot run (or a box that cannot be made) decides the exit code."""
        settings = self._settings
        self._calls.gate.release()  # a restart after a stop: its calls may run
        argv, env = list(settings.command), self._env
        if self._box is not None:
            problem = self._box.problem() or self._box.probe()  # nothing is spawned in a box that cannot be made
            if problem:
                log.error("sandbox_unavailable", error=problem)
                print(f"ralph-supervise: {problem}", file=sys.stderr)
                self._life.finish(1)
                return
            argv, env = self._box.wrap(argv), self._box.env
        began = time.time()  # before the fork: a first call of milliseconds may be over before spawn returns
        # The tap reads the pipes before the fork: a call's notice, read at once on another thread, finds
        # their marks (without them its output is told by when it was read, and a busy machine reads late).
        (out, out_end), (err, err_end) = os.pipe2(os.O_CLOEXEC), os.pipe2(os.O_CLOEXEC)
        self._tap.attach(out, "stdout")
        self._tap.attach(err, "stderr")
        try:
            popen = spawn(argv, settings.workspace, env, loop_stdin(), stdout=out_end, stderr=err_end,
                          enter=self._cgroup.enter if self._cgroup is not None else None)
        except OSError as exc:
            log.error("child_spawn_failed", command=list(settings.command), error=str(exc))
            print(f"ralph-supervise: cannot run {settings.command[0]}: {exc.strerror or exc}", file=sys.stderr)
            self._life.finish(127 if isinstance(exc, FileNotFoundError) else 126)
            return
        finally:
            os.close(out_end)  # the loop's now: the tap reads the end of file when the last holder closes it
            os.close(err_end)
        self._reaper.adopt(popen)
        self.info = ChildInfo(popen.pid, began, popen)
        self._calls.child_started(began)
        self._actions.paused = False
        log.info(events.CHILD_STARTED, pid=popen.pid, command=list(settings.command))
        self._metrics.child_running(True)

    def collect_exits(self, *, helpers_first: bool = False) -> None:
        """Reap what has exited (SIGCHLD, the tick, after a stop); the loop's own exit is handled here."""
        codes = self._reaper.reap(helpers_first=helpers_first)
        info = self.info
        if info is not None and info.pid in codes:
            self._exited(codes[info.pid])

    def on_sigchld(self) -> None:
        """A child exited: reap. When a helper's exit (git's, four a snapshot) stands before the rest, look
        again in HELPER_WAIT_S, by when its owner has waited for it, rather than list every zombie now."""
        self.collect_exits(helpers_first=True)
        if self._reaper.helper_in_the_way and not self._look_again_due:
            self._look_again_due = True
            asyncio.get_running_loop().call_later(HELPER_WAIT_S, self._look_again)

    def _look_again(self) -> None:
        self._look_again_due = False
        self.collect_exits()

    def forget_if_gone(self) -> None:
        """After a stop: the child's exit was collected, so it is gone."""
        if self.info is not None and self._reaper.exit_code(self.info.pid) is not None:
            self.info = None

    def _exited(self, code: int) -> None:
        info, self.info = self.info, None
        assert info is not None
        log.info(events.CHILD_EXITED, pid=info.pid, code=code, iteration=self._iteration())
        self._metrics.child_running(False)
        if self._actions.stopping or self.restart_pending:
            return
        self._on_exit(code)
