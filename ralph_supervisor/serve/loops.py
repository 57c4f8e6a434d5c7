"""What the page shows of each loop, read through the modules that own the files.

The registry (`registry.py`, via `fleet.py`) says which loops there are; each loop's `state.json`
(`files/state_json.py`) how its breaker is; its `events.jsonl` (followed like `tail -f` with the view's
`JsonlFollower`, so a refresh reads only the new bytes) what happened lately; the report
(`report/`) the whole account for a loop's own page. `Loops.poll()` stats a few files per loop and
re-reads only what changed, so `serve` costs next to nothing while nobody looks and little while
somebody does.

    loops = Loops()
    changed = loops.poll()            # ids of the loops whose row or events changed, or that came and went
    rows = loops.rows()               # JSON-ready, one per loop, sorted
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ralph_supervisor import fleet, registry
from ralph_supervisor import events
from ralph_supervisor.event_fields import IterationFinished, SupervisorStarted
from ralph_supervisor.files import escalation_md, events_jsonl, report_html, state_json
from ralph_supervisor.store import iso_utc
from ralph_supervisor.values import as_int, as_opt_int, as_text
from ralph_supervisor.watch import JsonlFollower

EVENTS_KEPT = 200
"""Events a loop's page shows (and keeps in memory per loop)."""
EVENT_TAIL_BYTES = 64 * 1024
"""Most bytes of events.jsonl read when a loop is first seen (or its log rotated)."""
SPARK_ITERATIONS = 30
REPLY_CHARS = 300
ID_RE = re.compile(r"[A-Za-z0-9._-]{1,80}")


def loop_id(entry_path: str | Path) -> str:
    """A loop's id in the page's addresses: its registry entry's file name without `.json` (safe characters
    only, one per state folder)."""
    name = Path(entry_path).name
    return name[: -len(registry.ENTRY_SUFFIX)] if name.endswith(registry.ENTRY_SUFFIX) else name


class _Follower(JsonlFollower):
    """The view's follower, also telling which records are new since the last poll."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, lambda _record: True, EVENTS_KEPT, EVENT_TAIL_BYTES)
        self.fresh: list[dict[str, Any]] = []
        self.reloaded = False

    def _reload(self, identity: tuple[int, int]) -> None:
        super()._reload(identity)
        self.reloaded = True

    def _take(self, lines: list[bytes]) -> list[dict[str, Any]]:
        taken = super()._take(lines)
        self.fresh.extend(taken)
        return taken

    def take_fresh(self) -> tuple[list[dict[str, Any]], bool]:
        fresh, reloaded = self.fresh, self.reloaded
        self.fresh, self.reloaded = [], False
        return fresh, reloaded


def _stamp(path: Path) -> tuple[int, int, int] | None:
    return _stamp_str(str(path))


def _stamp_str(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


# ---------------------------------------------------------------------------------------------
# Pure: from what the files hold to what a row says


def public_event(record: Mapping[str, Any]) -> dict[str, Any]:
    """An event as the page shows it: its name, time, iteration and a few short fields (texts clipped)."""
    out: dict[str, Any] = {"event": as_text(record.get("event"), 60), "ts": as_text(record.get("ts"), 40)}
    iteration = as_opt_int(record.get("iteration"))
    if iteration is not None:
        out["iteration"] = iteration
    details = []
    for key, value in record.items():
        if key in ("event", "ts", "iteration", "level", "logger", "reply", "status_block", "error_signatures"):
            continue
        if isinstance(value, (str, int, float)):  # bools are ints
            details.append(f"{key}={as_text(value, 160)}")
        if len(details) >= 8:
            break
    out["detail"] = as_text(" ".join(details), 600)
    return out


def summarize(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """From the recent events: the files changed per iteration (the sparkline), the last reply, the last
    verify, the run's budgets and the limit wait, each where the tail still holds it."""
    spark: deque[int] = deque(maxlen=SPARK_ITERATIONS)
    reply: dict[str, Any] | None = None
    verify: dict[str, Any] | None = None
    budgets: dict[str, int | float] = {}
    for record in records:
        name = events.name(record)
        if name == events.ITERATION_FINISHED:
            done = IterationFinished.of(record)
            spark.append(done.files_changed + done.commits)
            if done.reply:
                reply = {"iteration": done.iteration, "text": as_text(done.reply, REPLY_CHARS)}
        elif name == events.VERIFY_FINISHED:
            verify = {k: as_int(record.get(k)) for k in ("passed", "failed", "errors", "skipped")}
            verify["iteration"] = as_opt_int(record.get("iteration"))
        elif name == events.SUPERVISOR_STARTED:
            budgets = SupervisorStarted.of(record).budgets.numbers()
            spark.clear()
            reply = verify = None
    return {"spark": list(spark), "last_reply": reply, "verify": verify, "budgets": budgets}


# ---------------------------------------------------------------------------------------------
# The loops, followed


@dataclass
class Loop:
    """One registered loop and what was last read of it."""

    id: str
    entry: registry.Entry
    row: dict[str, Any] = field(default_factory=dict)
    follower: _Follower | None = None
    state_stamp: tuple[int, int, int] | None = None
    events_stamp: tuple[int, int, int] | None = None
    others_stamp: tuple[Any, ...] = ()
    """escalation.md and report.html: the row links to them once they exist."""
    alive: bool | None = None
    alive_checked: float = float("-inf")
    fresh_events: list[dict[str, Any]] = field(default_factory=list)
    """Events appended since the last poll (the page's live feed); the poller hands them out and clears them."""

    def __post_init__(self) -> None:
        self.state_dir = Path(self.entry.state_dir)
        self._state_file = str(state_json.path(self.state_dir))   # strings: a poll stats them many times
        self._events_file = str(events_jsonl.path(self.state_dir))
        self._other_files = (str(escalation_md.path(self.state_dir)), str(report_html.path(self.state_dir)))

    def events(self) -> list[dict[str, Any]]:
        return [public_event(r) for r in (self.follower.records if self.follower else ())]


ALIVE_EVERY_S = 1.0
"""How often a loop's supervisor is looked up in /proc (a SIGKILLed one leaves no file change behind)."""


class Loops:
    """Every loop of the registry, re-read where its files changed."""

    def __init__(self, dirs: list[Path] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.dirs = dirs
        self.clock = clock
        self.loops: dict[str, Loop] = {}
        self._registry_stamp: tuple[Any, ...] | None = None
        self._boot = registry.current_boot_id()
        self.problems: list[str] = []

    def _folders(self) -> list[Path]:
        return registry.reading_dirs() if self.dirs is None else self.dirs

    def _registry_signature(self, folders: list[Path]) -> tuple[Any, ...]:
        """The folders' own stamps: every entry is written by a rename and removed by an unlink, so a
        folder's mtime moves whenever an entry comes, changes or goes."""
        return tuple((str(folder), _stamp(folder)) for folder in folders)

    def poll(self) -> set[str]:
        """Re-read what changed; the ids of the loops that came, went or changed."""
        changed: set[str] = set()
        folders = self._folders()
        signature = self._registry_signature(folders)
        if signature != self._registry_stamp:
            self._registry_stamp = signature
            changed |= self._reload_registry(folders)
        now = self.clock()
        for loop in self.loops.values():
            if self._refresh(loop, now):
                changed.add(loop.id)
        return changed

    def _reload_registry(self, folders: list[Path]) -> set[str]:
        listings = [registry.read_registry(folder) for folder in folders]
        self.problems = [p for listing in listings if not listing.missing for p in listing.problems]
        seen: dict[str, Loop] = {}
        changed: set[str] = set()
        for listing in listings:
            for entry in listing.entries:
                ident = loop_id(entry.path)
                if ident in seen:
                    continue
                loop = self.loops.get(ident)
                if loop is None or loop.entry != entry:
                    loop = Loop(ident, entry)
                    changed.add(ident)
                seen[ident] = loop
        changed |= set(self.loops) - set(seen)
        self.loops = seen
        return changed

    def _refresh(self, loop: Loop, now: float) -> bool:
        state_stamp = _stamp_str(loop._state_file)
        events_stamp = _stamp_str(loop._events_file)
        alive = loop.alive
        if loop.entry.ended:
            alive = False  # it said so at exit: nothing to look up in /proc
        elif alive is None or now - loop.alive_checked >= ALIVE_EVERY_S:
            alive = registry.is_alive(loop.entry, registry.start_ticks(loop.entry.pid), self._boot)
            loop.alive_checked = now
        others = tuple(os.path.exists(p) for p in loop._other_files)
        if (state_stamp == loop.state_stamp and events_stamp == loop.events_stamp and alive == loop.alive
                and others == loop.others_stamp):
            return False
        loop.state_stamp, loop.events_stamp, loop.alive, loop.others_stamp = state_stamp, events_stamp, alive, others
        if loop.follower is None:
            loop.follower = _Follower(Path(loop._events_file))
        loop.follower.poll()
        fresh, reloaded = loop.follower.take_fresh()
        if not reloaded:
            loop.fresh_events.extend(public_event(r) for r in fresh)
            del loop.fresh_events[:-EVENTS_KEPT]
        new_row = make_row(loop, alive)
        if new_row == loop.row and not fresh:
            return False
        loop.row = new_row
        return True

    def rows(self) -> list[dict[str, Any]]:
        return [loop.row for loop in sorted(self.loops.values(), key=lambda l: (l.row.get("name", ""), l.id))]

    def get(self, ident: str) -> Loop | None:
        return self.loops.get(ident) if ID_RE.fullmatch(ident or "") else None


def make_row(loop: Loop, alive: bool) -> dict[str, Any]:
    """The row of the list: what `ls` says, the breaker's reason, and the summary of the recent events."""
    entry = loop.entry
    state, note = fleet.read_state(loop.state_dir)
    row = dataclasses.asdict(fleet.loop_row(entry, alive=alive, state=state, note=note))
    row.pop("entry", None)
    row.update(id=loop.id, reason=as_text(state.reason, 300), total_opens=state.total_opens,
               opened_at=iso_utc(state.opened_at) if state.opened_at is not None else None,
               escalation=escalation_md.path(loop.state_dir).is_file(),
               report=report_html.path(loop.state_dir).is_file(),
               ended=not alive)
    row.update(summarize(loop.follower.records if loop.follower else ()))
    return row
