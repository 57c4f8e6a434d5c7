"""`ralph-supervise watch`: a live terminal view of one supervised loop.

It only reads: the state folder's files (tails of the jsonl files, followed incrementally so a
refresh reads just the new bytes) and, when a supervisor runs, one `status` request per refresh on
the control socket. Nobody watching costs the supervisor nothing; somebody watching costs it one
small request a second. Every file may be missing, empty, half-written or garbage: the view shows
what it can and says what it could not read.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ralph_supervisor import control, events, rotating, status_json
from ralph_supervisor.breaker import Breaker, Thresholds
from ralph_supervisor.event_fields import Budgets, IterationFinished, SupervisorStarted
from ralph_supervisor.rotating import complete_lines, tail_lines
from ralph_supervisor.files import events_jsonl, history_jsonl, state_json
from ralph_supervisor.files.history_jsonl import Transition
from ralph_supervisor.format import dollars_share, duration, human_bytes, share, sparkline, time_of_day
from ralph_supervisor.outcomes import STATE_STYLE, Outcome
from ralph_supervisor.terminal import Outlet
from ralph_supervisor.triggers import WAITS_FOR_HUMAN
from ralph_supervisor.values import (
    as_float,
    as_int,
    as_opt_int,
    as_text,
    parse_json_lines,
    parse_time,
)

log = structlog.get_logger(__name__)

TIMELINE_ROWS = 15
SPARK_ITERATIONS = 60
"""The sparkline in the header covers this many of the last iterations."""
TRANSITION_ROWS = 8
PROCESS_ROWS = 12
TAIL_BYTES = 1024 * 1024
"""Most bytes read from the end of a jsonl file when (re)loading it, or appended between refreshes."""
STATUS_TIMEOUT = 1.0



# ---------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True)
class IterationRow:
    iteration: int | None
    finished_at: str
    files_changed: int
    commits: int
    output_bytes: int
    errors: int
    tokens: int
    outcome: str
    """The ledger's word (success, failure, noop), as the event has it."""
    said: Outcome | None = None
    """What the view shows: the outcome mark and word everybody uses (`outcomes.py`)."""


@dataclass(frozen=True)
class ProcessRow:
    pid: int | None
    name: str
    status: str
    cpu_percent: float | None
    """As the supervisor reported it, or derived from `cpu_seconds` between two frames; None at first."""
    cpu_seconds: float | None = None
    """Total CPU time so far, when the supervisor reports it."""


@dataclass(frozen=True)
class CurrentIteration:
    iteration: int | None
    age_s: float | None


@dataclass(frozen=True)
class Frame:
    """Everything one frame shows, read at one moment."""

    workspace: str
    state_dir: str
    breaker: Mapping[str, Any]
    """status --json shaped: from the live supervisor when it answered, else from state.json."""
    live: bool
    current: CurrentIteration | None
    iterations: tuple[IterationRow, ...]
    transitions: tuple[Transition, ...]
    processes: tuple[ProcessRow, ...]
    notes: tuple[str, ...] = ()
    state_dir_exists: bool = True
    recent: tuple[IterationFinished, ...] = ()
    """The last finished iterations (for the sparkline and the spend), oldest first."""
    budgets: Budgets = Budgets()
    """The run's budgets, from its `supervisor_started` event, when it is still in the log's tail."""


# ---------------------------------------------------------------------------------------------
# Pure: from raw records to rows


def is_iteration_finished(record: Mapping[str, Any]) -> bool:
    return events.name(record) == events.ITERATION_FINISHED


def iteration_row(done: IterationFinished) -> IterationRow:
    return IterationRow(
        iteration=done.iteration,
        finished_at=done.ts,
        files_changed=done.files_changed,
        commits=done.commits,
        output_bytes=done.output_bytes,
        errors=done.errors or 0,
        tokens=done.tokens or 0,
        outcome=done.outcome or "?",
        said=done.said() if done.outcome in ("success", "failure", "noop") else None,
    )


def is_supervisor_started(record: Mapping[str, Any]) -> bool:
    return events.name(record) == events.SUPERVISOR_STARTED


def finished_iterations(records: Iterable[Mapping[str, Any]]) -> list[IterationFinished]:
    """The `iteration_finished` records among `records`, read (`event_fields.py`), in order."""
    return [IterationFinished.of(record) for record in records if is_iteration_finished(record)]


def sparklines(recent: Iterable[IterationFinished], width: int = SPARK_ITERATIONS) -> tuple[str, str, int]:
    """The report's timeline in small: changes (files and commits) and errors of the last iterations."""
    rows = list(recent)[-width:]
    changes = [float(r.files_changed + r.commits) for r in rows]
    errors = [float(r.errors or (1 if r.failed is True else 0)) for r in rows]
    return sparkline(changes, width), sparkline(errors, width), len(rows)


def spend_line(view: Mapping[str, Any], recent: Iterable[IterationFinished], budgets: Budgets) -> str:
    """Tokens and dollars spent this run, against the budgets when they are known."""
    tokens = as_int(view.get("tokens_used"))
    line = f"tokens {share(tokens, budgets.token_budget or 0)}"
    cost = as_float(view.get("cost_usd"))
    if cost is None:
        costs = [r.cost_usd for r in recent if r.cost_usd is not None]
        cost = sum(costs) if costs else None
    if cost is not None or budgets.cost_budget:
        line += f" · dollars {dollars_share(cost, budgets.cost_budget or 0.0)}"
    return line


def timeline(finished: Iterable[IterationFinished], limit: int = TIMELINE_ROWS) -> tuple[IterationRow, ...]:
    """The last `limit` finished iterations, oldest first; a repeated number keeps its latest record."""
    rows: dict[Any, IterationRow] = {}
    for index, done in enumerate(finished):
        row = iteration_row(done)
        key = row.iteration if row.iteration is not None else ("anon", index)
        rows.pop(key, None)
        rows[key] = row
    return tuple(rows.values())[-limit:]


def transitions(records: Iterable[Mapping[str, Any]], limit: int = TRANSITION_ROWS) -> tuple[Transition, ...]:
    """The last `limit` lines of history.jsonl that record a transition, as its owner reads them."""
    return tuple(history_jsonl.transitions(records)[-limit:])


def processes(status: Mapping[str, Any] | None) -> tuple[ProcessRow, ...]:
    """The tree's processes as reported (`cpu_percent` and/or cumulative `cpu_s`), busiest first."""
    tree = status.get("tree") if status else None
    if not isinstance(tree, list):
        return ()
    rows = [
        ProcessRow(
            pid=as_opt_int(p.get("pid")),
            name=as_text(p.get("name"), 40) or "?",
            status=as_text(p.get("status"), 20),
            cpu_percent=as_float(p.get("cpu_percent")),
            cpu_seconds=as_float(p.get("cpu_s")),
        )
        for p in tree
        if isinstance(p, dict)
    ]
    return busiest_first(rows)


def busiest_first(rows: Iterable[ProcessRow]) -> tuple[ProcessRow, ...]:
    return tuple(sorted(rows, key=lambda r: (-(r.cpu_percent or 0.0), -(r.cpu_seconds or 0.0))))


CpuSample = dict[int, tuple[float, float]]
"""pid -> (cpu seconds, wall time) of the previous frame."""


def with_cpu_rates(rows: tuple[ProcessRow, ...], previous: CpuSample, now: float) -> tuple[tuple[ProcessRow, ...], CpuSample]:
    """Fill a missing `cpu_percent` from the growth of `cpu_seconds` since the previous frame.

    The supervisor may report only cumulative CPU time (cheap for it); the rate is the watcher's
    business. A new pid, a pid whose time went backwards (reused) or a zero interval gets no rate.
    """
    sample: CpuSample = {}
    out = []
    for row in rows:
        if row.pid is not None and row.cpu_seconds is not None:
            sample[row.pid] = (row.cpu_seconds, now)
            if row.cpu_percent is None and row.pid in previous:
                before, then = previous[row.pid]
                if now > then and row.cpu_seconds >= before:
                    row = replace(row, cpu_percent=100.0 * (row.cpu_seconds - before) / (now - then))
        out.append(row)
    return busiest_first(out), sample


def current_iteration(status: Mapping[str, Any] | None, now: float) -> CurrentIteration | None:
    """The running iteration and its age: `age_s` when the supervisor gave it, else from `started_at`."""
    current = status.get("current") if status else None
    if not isinstance(current, dict):
        return None
    age = as_float(current.get("age_s"))
    if age is None:
        started = parse_time(current.get("started_at"))
        age = max(0.0, now - started) if started is not None else None
    return CurrentIteration(iteration=as_opt_int(current.get("iteration")), age_s=age)


def breaker_view(from_file: Mapping[str, Any] | None, status: Mapping[str, Any] | None) -> dict[str, Any]:
    """status --json shape: the live answer wins, the reply made from state.json (`file_status`) fills in."""
    view: dict[str, Any] = {}
    if isinstance(from_file, Mapping):
        view.update(from_file)
    if isinstance(status, Mapping):
        view.update(status)
    return view


def clock(value: Any) -> str:
    """HH:MM:SS in local time, or the raw text when it is not a time."""
    return time_of_day(value, "%H:%M:%S", otherwise=as_text(value, 20))


def cooldown_left(view: Mapping[str, Any], now: float) -> float | None:
    if view.get("state") != "OPEN" or view.get("final") is True or view.get("trigger") in WAITS_FOR_HUMAN:
        return None  # a final, manual or destructive open waits for a human, not for a clock
    opened = parse_time(view.get("opened_at"))
    cooldown = as_float(view.get("cooldown_s"))
    if opened is None or cooldown is None:
        return None
    return max(0.0, opened + cooldown - now)


# ---------------------------------------------------------------------------------------------
# Pure: rendering


def render(snap: Frame, now: float) -> RenderableType:
    return Group(
        _header(snap, now),
        _timeline_table(snap.iterations),
        _transitions_table(snap.transitions),
        _process_table(snap.processes, snap.live),
        _footer(snap, now),
    )


def _header(snap: Frame, now: float) -> Panel:
    view = snap.breaker
    state = as_text(view.get("state"), 20) or "CLOSED"
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()

    breaker = Text(state, style=STATE_STYLE.get(state, "bold magenta"))
    trigger = as_text(view.get("trigger"), 40)
    if trigger and trigger != "none":
        breaker.append(f"  trigger {trigger}", style="bold")
    breaker.append(f"  opens {as_int(view.get('total_opens'))}", style="dim")
    left = cooldown_left(view, now)
    if left is not None:
        breaker.append(f"  half-open in {duration(left)}", style="yellow")
    if view.get("limit_until"):
        waits_for = {"ceiling": "the usage ceiling", "outage": "an API outage's back-off"}.get(
            as_text(view.get("wait_kind"), 20), "a usage limit")
        breaker.append(f"  LIMIT until {clock(view.get('limit_until'))}: the tree waits for {waits_for}",
                       style="bold blue")
    if view.get("outage_since"):
        breaker.append(f"  OUTAGE since {clock(view.get('outage_since'))}: "
                       f"{as_text(view.get('outage_message'), 120) or 'the agent cannot reach its API'}",
                       style="bold blue")
    grid.add_row("breaker", breaker)
    cgroup = view.get("cgroup")
    if isinstance(cgroup, dict):
        memory = as_int(cgroup.get("memory_bytes")) if cgroup.get("memory_bytes") is not None else None
        grid.add_row("cgroup", Text(f"{as_int(cgroup.get('tasks'))} processes, {cgroup.get('cpu_s')} CPU s"
                                    + (f", {human_bytes(memory)}" if memory is not None else ""), style="dim"))
    usage = [w for w in view.get("usage") or [] if isinstance(w, dict)]
    if usage:
        grid.add_row("usage", Text(", ".join(f"{as_text(w.get('window'), 40)} {w.get('utilization')} %"
                                             + (f" (resets {clock(w.get('resets_at'))})" if w.get("resets_at") else "")
                                             for w in usage[:4]), style="yellow"))
    reason = as_text(view.get("reason"), 300)
    if reason:
        grid.add_row("reason", Text(reason))

    line = Text(f"{as_int(view.get('iteration'))}")
    if snap.current is not None:
        number = snap.current.iteration if snap.current.iteration is not None else "?"
        line.append(f"   running #{number} for {duration(snap.current.age_s)}", style="cyan")
    elif snap.live:
        line.append("   between iterations", style="dim")
    grid.add_row("iteration", line)

    counters = Text(
        f"no-progress {as_int(view.get('consecutive_no_progress'))}   "
        f"same-error {as_int(view.get('consecutive_same_error'))}   "
        f"failures {as_int(view.get('consecutive_failures'))}   "
        f"tokens {as_int(view.get('tokens_used')):,}"
    )
    grid.add_row("counters", counters)
    changes, errors, count = sparklines(snap.recent)
    if count:
        recent = Text("changes ", style="dim")
        recent.append(changes, style="green")
        recent.append("  errors ", style="dim")
        recent.append(errors, style="red")
        recent.append(f"  (last {count})", style="dim")
        grid.add_row("recent", recent)
    grid.add_row("spend", Text(spend_line(view, snap.recent, snap.budgets)))
    grid.add_row("supervisor", _supervisor_line(view, snap.live))
    child = view.get("child")
    if isinstance(child, Mapping):
        text = Text(f"pid {as_opt_int(child.get('pid'))}  ")
        text.append("running" if child.get("running") else "not running", style="green" if child.get("running") else "red")
        if child.get("paused"):
            text.append("  PAUSED", style="bold yellow")
        text.append(f"  {as_int(child.get('processes'))} processes", style="dim")
        grid.add_row("child", text)
    title = f"ralph-supervise · {snap.workspace}"
    return Panel(grid, title=title, title_align="left", border_style=STATE_STYLE.get(state, "magenta").split()[-1])


def _supervisor_line(view: Mapping[str, Any], live: bool) -> Text:
    sup = view.get("supervisor")
    pid = as_opt_int(sup.get("pid")) if isinstance(sup, Mapping) else None
    if live:
        return Text(f"pid {pid}  running", style="green")
    return Text("not running (breaker from state.json)", style="dim")


def _timeline_table(rows: tuple[IterationRow, ...]) -> Table:
    table = Table(title=f"last {len(rows)} iterations" if rows else "iterations", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False)
    for name, justify in (("#", "right"), ("finished", "left"), ("outcome", "left"), ("files", "right"),
                          ("commits", "right"), ("errors", "right"), ("tokens", "right"), ("output", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    if not rows:
        table.add_row("", Text("no finished iteration yet", style="dim"), "", "", "", "", "", "")
    for row in rows:
        table.add_row(
            str(row.iteration) if row.iteration is not None else "?",
            clock(row.finished_at),
            Text(row.said.label, style=row.said.style) if row.said else Text(row.outcome, style="dim"),
            Text(str(row.files_changed), style="green" if row.files_changed else "dim"),
            Text(str(row.commits), style="green" if row.commits else "dim"),
            Text(str(row.errors), style="red" if row.errors else "dim"),
            f"{row.tokens:,}",
            human_bytes(row.output_bytes),
        )
    return table


def _transitions_table(rows: tuple[Transition, ...]) -> Table:
    table = Table(title="breaker transitions", title_justify="left", expand=True, box=box.SIMPLE_HEAD,
                  show_edge=False)
    table.add_column("time", no_wrap=True)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("change", no_wrap=True)
    table.add_column("trigger", no_wrap=True)
    table.add_column("reason", ratio=1, overflow="fold")
    if not rows:
        table.add_row(Text("none yet", style="dim"), "", "", "", "")
    for row in reversed(rows):  # newest first: the one that matters is on top
        change = Text(row.from_state or "?", style=STATE_STYLE.get(row.from_state, ""))
        change.append(" → ")
        change.append(row.to_state or "?", style=STATE_STYLE.get(row.to_state, ""))
        table.add_row(clock(row.ts), "" if row.iteration is None else str(row.iteration), change, row.trigger, row.reason)
    return table


def _process_table(rows: tuple[ProcessRow, ...], live: bool) -> Table:
    rates = [r.cpu_percent for r in rows if r.cpu_percent is not None]
    title = f"tree: {len(rows)} processes" if rows else "tree"
    if rates:
        title += f", {sum(rates):.0f}% CPU"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("pid", justify="right", no_wrap=True)
    table.add_column("name", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("cpu %", justify="right", no_wrap=True)
    table.add_column("cpu time", justify="right", no_wrap=True)
    if not rows:
        table.add_row("", Text("no process list" if live else "no supervisor running", style="dim"), "", "", "")
    for row in rows[:PROCESS_ROWS]:
        busy = (row.cpu_percent or 0.0) >= 50
        style = "yellow" if row.status == "stopped" else ("bold" if busy else "")
        table.add_row(str(row.pid) if row.pid is not None else "?", row.name, row.status,
                      "" if row.cpu_percent is None else f"{row.cpu_percent:.1f}",
                      "" if row.cpu_seconds is None else f"{row.cpu_seconds:.1f}s", style=style)
    if len(rows) > PROCESS_ROWS:
        table.add_row("", Text(f"… and {len(rows) - PROCESS_ROWS} more", style="dim"), "", "", "")
    return table


def _footer(snap: Frame, now: float) -> Text:
    text = Text(f"updated {clock(now)}   state folder {snap.state_dir}", style="dim")
    if not snap.state_dir_exists:
        text.append("\nthe state folder does not exist yet: waiting for a supervisor", style="yellow")
    for note in snap.notes:
        text.append(f"\n! {note}", style="yellow")
    return text


# ---------------------------------------------------------------------------------------------
# Shell: reading files and the socket


class JsonlFollower:
    """Follows a jsonl file like `tail -f`: reads only what was appended since the last poll.

    Keeps the last `keep_last` records that `wanted` accepts. On rotation (new inode, or the file
    shrank) it reloads from the end, backfilling from `NAME.1` when the new file has too few.

    Not a second reader of the format but another job: `rotating.read_json_lines` reads a file and all
    its rotated files once, whole (for the report, through the files' owners); a view refreshed every
    second must not, so this keeps its place in the live file between polls and reads only the bytes
    added since. What it reads goes through the same pieces: `rotating.tail_lines` (the one tail
    reader) on a reload, `rotating.complete_lines` for appended bytes, `values.parse_json_lines` for
    the records.
    """

    def __init__(self, path: Path, wanted: Callable[[Mapping[str, Any]], bool], keep_last: int,
                 max_bytes: int = TAIL_BYTES) -> None:
        self.path = path
        self._wanted = wanted
        self._max_bytes = max_bytes
        self.records: deque[dict[str, Any]] = deque(maxlen=keep_last)
        self.corrupt_lines = 0
        self.error: str | None = None
        self._identity: tuple[int, int] | None = None
        self._offset = 0

    def poll(self) -> list[dict[str, Any]]:
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) != self._identity or st.st_size < self._offset:
                self._reload((st.st_dev, st.st_ino))
            elif st.st_size > self._offset:
                self._read_appended(st.st_size)
            self.error = None
        except FileNotFoundError:
            self._identity, self._offset = None, 0
            self.records.clear()
            self.error = None
        except OSError as exc:
            self.error = f"cannot read {self.path.name}: {exc.strerror or exc}"
        return list(self.records)

    def _reload(self, identity: tuple[int, int]) -> None:
        self.records.clear()
        self.corrupt_lines = 0
        lines, offset = tail_lines(self.path, self._max_bytes)
        records = self._take(lines)
        if len(records) < (self.records.maxlen or 0):
            rotated = rotating.rotated_path(self.path, 1)
            try:
                older, _ = tail_lines(rotated, self._max_bytes)
                records = self._take(older) + records
            except OSError:
                pass
        self.records.extend(records)
        self._identity, self._offset = identity, offset

    def _read_appended(self, size: int) -> None:
        start = self._offset
        cut = False
        if size - start > self._max_bytes:  # fell far behind: skip to the recent part
            start, cut = size - self._max_bytes, True
        with open(self.path, "rb") as fh:
            fh.seek(start)
            data = fh.read(size - start)
        lines, offset = complete_lines(data, start, cut_first=cut)
        self.records.extend(self._take(lines))
        self._offset = offset

    def _take(self, lines: list[bytes]) -> list[dict[str, Any]]:
        records, bad = parse_json_lines(lines)
        self.corrupt_lines += bad
        return [r for r in records if self._wanted(r)]


def file_status(state_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The `status --json` reply made from state.json by its one builder (`status_json.reply`: what `status`
    says with no supervisor running), or None and a note saying why not (a missing file is not worth a note).
    The file is read and checked by its owner (`state_json.read`), as the supervisor would."""
    recorded, note = state_json.read(state_dir)
    if recorded is None:
        return None, note
    return status_json.reply(Breaker(Thresholds(), recorded.snapshot), limit_until=recorded.limit_until,
                             supervisor_pid=None, child=None), None


def ask_status(state_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return control.request(state_dir, "status", timeout=STATUS_TIMEOUT), None
    except control.NoSupervisor:
        return None, None
    except control.ControlError as exc:
        return None, f"control socket: {exc}"
    except OSError as exc:  # never let the view die on a socket oddity
        return None, f"control socket: {exc}"


@dataclass
class Watcher:
    """Reads one state folder, frame after frame, as cheaply as it can."""

    workspace: Path
    state_dir: Path
    _events: JsonlFollower = field(init=False)
    _history: JsonlFollower = field(init=False)
    _started: JsonlFollower = field(init=False)
    _cpu: CpuSample = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._events = JsonlFollower(events_jsonl.path(self.state_dir), is_iteration_finished,
                                     max(TIMELINE_ROWS * 4, SPARK_ITERATIONS))
        self._started = JsonlFollower(events_jsonl.path(self.state_dir), is_supervisor_started, 1)
        self._history = JsonlFollower(history_jsonl.path(self.state_dir), lambda r: True, TRANSITION_ROWS)

    def frame(self, now: float) -> Frame:
        notes: list[str] = []
        exists = self.state_dir.is_dir()
        state, note = file_status(self.state_dir)
        if note:
            notes.append(note)
        status, note = ask_status(self.state_dir) if exists else (None, None)
        if note:
            notes.append(note)
        finished = finished_iterations(self._events.poll())
        history = self._history.poll()
        for follower in (self._events, self._history):
            if follower.error:
                notes.append(follower.error)
            if follower.corrupt_lines:
                notes.append(f"{follower.corrupt_lines} unreadable line(s) in {follower.path.name} skipped")
        tree, self._cpu = with_cpu_rates(processes(status), self._cpu, now)
        return Frame(
            workspace=str(self.workspace),
            state_dir=str(self.state_dir),
            breaker=breaker_view(state, status),
            live=status is not None,
            current=current_iteration(status, now),
            iterations=timeline(finished),
            recent=tuple(finished[-SPARK_ITERATIONS:]),
            budgets=_budgets(self._started.poll()),
            transitions=transitions(history),
            processes=tree,
            notes=tuple(notes),
            state_dir_exists=exists,
        )


def _budgets(started: list[dict[str, Any]]) -> Budgets:
    return SupervisorStarted.of(started[-1]).budgets if started else Budgets()


def _console(file: Any = None, width: int = 120) -> Console:
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        return Console(file=file)
    return Console(file=file, width=width)  # a pipe or a test: wide enough that nothing is cut


def show(frame: Callable[[float], RenderableType], *, once: bool = False, interval: float = 1.0,
         width: int = 120) -> int:
    """Print `frame(now)` once, or refresh it every `interval` seconds until Ctrl-C. Always 0.

    The live view writes through a terminal outlet of its own thread (`ralph_supervisor/terminal/`):
    a terminal that stops reading (Ctrl-S, a pane nobody reads) only skips frames, so Ctrl-C always
    ends the view, after at most a second spent putting the screen back."""
    if once:
        _console(width=width).print(frame(time.time()))
        return 0
    interval = max(0.1, interval)
    outlet = Outlet(1)
    stream = outlet.stream()
    console = _console(stream, width)
    try:
        with Live(frame(time.time()), console=console, screen=console.is_terminal, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                if not stream.drained():
                    continue  # the terminal has not taken the last frame: no new one on top of it
                live.update(frame(time.time()), refresh=True)
    except KeyboardInterrupt:
        pass
    finally:
        try:
            stream.flush()
            outlet.close(1.0)
        except KeyboardInterrupt:
            pass
    return 0


def main(workspace: Path, state_dir: Path, *, once: bool = False, interval: float = 1.0) -> int:
    """Show the dashboard until Ctrl-C (or one frame with `once`). Always 0: watching cannot fail."""
    watcher = Watcher(Path(workspace), Path(state_dir))
    return show(lambda now: render(watcher.frame(now), now), once=once, interval=interval)
