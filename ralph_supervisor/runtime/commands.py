"""What the control socket's requests do: `status`, `pause`, `resume`, `reset`, `stop`.

A request acts like a breaker decision with a plan of its own (`decisions.plan_for_request`), under the
same lock as every tree action. A pause or stop by hand takes over from a wait the tree is frozen for; a
resume or reset ends it.

    >>> server = ControlServer(socket_path(state_dir), commands.handle)   # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from ralph_supervisor import status_json, store
from ralph_supervisor.breaker import Breaker, Decision, State
from ralph_supervisor.control import COMMANDS, ControlError
from ralph_supervisor.decisions import plan_for_request
from ralph_supervisor.process.linux import CLOCK_TICKS
from ralph_supervisor.runtime.apply import Applier
from ralph_supervisor.runtime.child import Child
from ralph_supervisor.runtime.wait_episode import WaitEpisode

TREE_SHOWN = 50
"""Processes of the tree `status` lists (the `watch` view's table)."""


class Commands:
    """Answers control requests. Event loop only."""

    def __init__(self, *, breaker: Breaker, actions: Any, applier: Applier, episode: WaitEpisode, child: Child,
                 tree: Any, cgroup: Any, keeper: Any, verify: Any, loop_waits: Any, tracker: Any, tap: Any,
                 analysis: Any, terminal: Any, tree_size: Callable[[], int]) -> None:
        self._breaker = breaker
        self._actions = actions
        self._applier = applier
        self._episode = episode
        self._child = child
        self._tree = tree
        self._cgroup = cgroup
        self._keeper = keeper
        self._verify = verify
        self._loop_waits = loop_waits
        self._tracker = tracker
        self._tap = tap
        self._analysis = analysis
        self._terminal = terminal
        self._tree_size = tree_size

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request.get("cmd")
        now = time.time()
        if cmd == "status":
            return self.status()
        if cmd not in COMMANDS:
            raise ControlError(f"unknown command {cmd!r}")
        breaker, episode = self._breaker, self._episode
        async with self._actions.lock:
            if episode.until is not None:
                if cmd in ("resume", "reset"):
                    await episode.end(f"{cmd} by request")
                else:  # a pause (or stop) by hand takes over from the wait: no thaw when the limit resets
                    episode.taken_over()
            if cmd == "pause":
                if self._actions.paused and breaker.state is State.OPEN:
                    return {"message": "the tree is already paused", **self.status()}
                await self._applier.apply_locked(breaker.manual_open("paused by request (ralph-supervise pause)", now),
                                                 plan_for_request(cmd), record=True)
                return {"message": f"paused {self._tree_size()} processes", **self.status()}
            if cmd == "stop":
                await self._applier.apply_locked(Decision("none", breaker.state, breaker.trigger, "stop requested",
                                                          breaker.iteration), plan_for_request(cmd))
                return {"message": "the tree is stopped; the supervisor exits"}
            decision = breaker.resume(now) if cmd == "resume" else breaker.reset()
            await self._applier.apply_locked(decision, plan_for_request(cmd))
            message = "resumed: the next iteration is the trial" if cmd == "resume" else "breaker reset to CLOSED"
            return {"message": message, **self.status()}

    def status(self) -> dict[str, Any]:
        """The `status --json` answer (`status_json.reply`), plus the live extras the `watch` view shows."""
        members = self._tree.sample()
        child = self._child.info
        cgroup = self._cgroup
        figures = cgroup.latest if cgroup is not None else None  # read by the sample just now
        now = time.time()
        data = status_json.reply(
            self._breaker, limit_until=self._episode.until, supervisor_pid=os.getpid(),
            child=None if child is None else {"pid": child.pid, "running": True,
                                              "paused": self._actions.paused and self._tree.held(members),
                                              "processes": len(members)},
            snapshots=self._keeper.status(), verify=self._verify.status() if self._verify is not None else None,
            waits=self._loop_waits.status(now, frozen_for=self._episode.frozen_for),
            cgroup=None if figures is None else {"path": str(cgroup.path), **figures.to_dict()})
        call = self._tracker.current
        if call is not None:
            data["current"] = {"iteration": call.number, "started_at": store.iso_utc(call.started_wall),
                               "age_s": round(now - call.started_wall, 1)}
        data["tree"] = [{"pid": stat.pid, "name": stat.name, "status": stat.state,
                         "cpu_s": round(stat.cpu_ticks / CLOCK_TICKS, 2)} for stat in members[:TREE_SHOWN]]
        analysis = self._analysis
        data["tap"] = {"bytes_read": self._tap.counters.bytes_read,
                       "analysis_dropped_bytes": analysis.dropped_bytes,
                       "analysis_lag_bytes": analysis.lag_bytes,
                       "cut_lines": analysis.cut_lines(),
                       "echo_dropped_bytes": self._terminal.echo_dropped_bytes}
        return data
