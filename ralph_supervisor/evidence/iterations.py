"""Cutting the run into iterations, and gathering each iteration's evidence.

An iteration is one agent call: by default the life of a descendant process whose name is one of
`--iteration-process` (`agents/recognize.py` says which processes are calls), or, with `--iteration-marker`,
the stretch of output from one matching line to the next. The tracker collects what the output
analysis finds for the call in progress and, when the call ends, hands back its `CallEvidence`;
the supervisor adds the workspace delta and builds the `IterationReport`.

Output goes to the call that had started when it was read (the latest start before the read), not to
the call the tracker knew of then: a call announced by its shim carries its own start time, so output read
before the supervisor processed the announcement is still that call's. Output read before any known start
(a sampled call is noticed late) is kept for a few seconds and claimed by the call whose process started
before it was read. Output read after a call ended, within `SETTLE_SECONDS` and before the next call
started (a `tee` behind the agent writes its last line late), is still the ended call's.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from ralph_supervisor.agents.reply_end import reply_ends_in
from ralph_supervisor.iteration import IterationReport
from ralph_supervisor.residual import states_blocker

MAX_ERROR_LINES = 50
MAX_TEXT_BYTES = 2 << 20
"""The tail of a call's output kept for reading its reply (the result object comes last)."""
PENDING_SECONDS = 10.0
PENDING_MAX_BYTES = 2 << 20
SETTLE_SECONDS = 0.15
"""How long after a call's end its late output (a tee, a pipe read late) is still its own."""
LOOP_ERRORS = 5


@dataclass(frozen=True)
class OutputResult:
    """What the analysis worker found in one chunk of output (passed to the event loop)."""

    source: str
    nbytes: int
    tag: int
    read_at: float
    """Wall-clock time the chunk was read (comparable with a process's create time)."""
    text: str | None
    """The chunk's complete lines, decoded and joined by "\n"; None when it completed no line."""
    errors: tuple[str, ...]
    starts: bool = False
    """Marker mode: this output begins with a marker line, so a new iteration begins with it."""
    offset: int | None = None
    """Where its bytes lie in their pipe's stream (see `OutputTap.marks`); None for a tailed file."""


@dataclass
class CallEvidence:
    """The evidence of the call in progress."""

    number: int
    started_at: float
    started_wall: float
    pid: int | None = None
    create_time: float | None = None
    name: str = ""
    """The call's process name (marker mode: empty)."""
    argv: tuple[str, ...] = ()
    """The call's command line, as far as it was seen."""
    output_bytes: int = 0
    error_lines: list[str] = field(default_factory=list)
    text: deque[str] = field(default_factory=deque)
    """The output's tail as whole chunks' text, oldest first; `output_text` trims it to lines."""
    text_bytes: int = 0
    cut_short: bool = False
    sources: set[str] = field(default_factory=set)
    ended_wall: float | None = None
    """When the call's process ended (None: still running)."""
    announced_at: float | None = None
    """When its shim announced it (exact, unlike the process start time, which the kernel keeps in ticks)."""
    start_marks: dict[str, int] | None = None
    """Announced calls: how far each pipe had been written when its notice was read (its output lies after)."""
    floor_marks: dict[str, int] | None = None
    """... and when the call before it ended. The notice is read a moment after the agent starts, longer on a
    busy machine, and a quick agent may have printed by then: what lies between the floor and the start
    mark is this call's when it was read after the announcement (earlier, it was the loop's)."""
    end_marks: dict[str, int] | None = None
    """... and when it ended (its output lies before). Without marks, output is told by when it was read."""

    def owns(self, result: OutputResult) -> bool | None:
        """By position in the stream: is this output the call's? None when the call has no marks for it."""
        if self.start_marks is None or result.offset is None or result.source not in self.start_marks:
            return None
        if result.offset < self.start_marks[result.source]:
            floor = (self.floor_marks or {}).get(result.source)
            if floor is None or result.offset < floor or self.announced_at is None or result.read_at < self.announced_at:
                return False
        end = (self.end_marks or {}).get(result.source)
        return end is None or result.offset < end

    @property
    def begins_at(self) -> float:
        """The earliest time output can be this call's: its announcement, else its process start."""
        if self.announced_at is not None:
            return self.announced_at
        return self.create_time if self.create_time is not None else self.started_wall

    def add(self, result: OutputResult) -> None:
        # Per chunk, never per line: this runs on the event loop thread, which also reads the pipes.
        self.output_bytes += result.nbytes
        self.sources.add(result.source)
        room = MAX_ERROR_LINES - len(self.error_lines)
        if room > 0 and result.errors:
            self.error_lines.extend(result.errors[:room])
        if result.text is None:
            return
        self.text.append(result.text)
        self.text_bytes += len(result.text) + 1
        while len(self.text) > 1 and self.text_bytes - len(self.text[0]) - 1 >= MAX_TEXT_BYTES:
            self.text_bytes -= len(self.text.popleft()) + 1

    def output_text(self) -> str:
        """The last whole lines of the call's output, at most MAX_TEXT_BYTES characters with their newlines."""
        text = "\n".join(self.text)
        if len(text) < MAX_TEXT_BYTES:
            return text
        cut = text.find("\n", len(text) - MAX_TEXT_BYTES)
        return text[cut + 1:] if cut >= 0 else ""


class IterationTracker:
    """Which call is in progress, and its evidence. Lives on the event loop thread."""

    def __init__(self, agent_names: Sequence[str], marker: str | None, last_number: int = 0) -> None:
        self.agent_names = tuple(agent_names)
        self.marker = re.compile(marker) if marker else None
        self.number = last_number
        self.current: CallEvidence | None = None
        self._pending: deque[OutputResult] = deque()
        self._pending_bytes = 0
        self._skip: set[tuple[int, float]] = set()
        self._closing: dict[int, CallEvidence] = {}
        """Calls that ended but whose last output may still be in analysis, by number."""
        self.loop_errors: deque[str] = deque(maxlen=LOOP_ERRORS)
        """The last error lines of output that was no call's (the loop's own)."""
        self.owned: Callable[[OutputResult, int], object] = lambda result, number: None
        """Told of every chunk once its call is known (the number of the call it went to), or once it is known
        to be no call's (the number of the last call): a reader of the agents' own words, such as the outage's,
        counts a chunk read before its call's start was processed as that call's."""
        self.loop_wait_until = 0.0
        """Until when (wall clock) the loop said it waits on purpose (Ralph's hourly call limit, its retry
        after a usage limit): not reaching the agent meanwhile is no stall."""

    @property
    def tag(self) -> int:
        """The tag output read now gets: the number of the call in progress, or 0."""
        return self.current.number if self.current is not None else 0

    def start(self, now: float, wall: float, pid: int | None = None, create_time: float | None = None,
              name: str = "", argv: Sequence[str] = (), announced_at: float | None = None,
              start_marks: dict[str, int] | None = None, floor_marks: dict[str, int] | None = None) -> CallEvidence:
        self.number += 1
        call = CallEvidence(self.number, now, wall, pid, create_time, name, tuple(argv), announced_at=announced_at,
                            start_marks=start_marks, floor_marks=floor_marks)
        self.current = call
        if create_time is not None or announced_at is not None:
            kept: deque[OutputResult] = deque()
            for result in self._pending:  # read before we knew of it, after it started: its own
                owns = call.owns(result)
                if owns or (owns is None and result.read_at >= call.begins_at):
                    self._give(call, result)
                    self._pending_bytes -= result.nbytes
                else:
                    kept.append(result)  # older: the last call's late words, or the loop's
            self._pending = kept
        return call

    def finish(self, ended_wall: float | None = None) -> CallEvidence | None:
        """End the call in progress; its late output still reaches it until `release`."""
        call, self.current = self.current, None
        if call is not None:
            call.ended_wall = ended_wall
            self._closing[call.number] = call
        return call

    def release(self, number: int) -> None:
        self._closing.pop(number, None)

    def pending_reply_ends(self, after: float, ends: Callable[[str | None], bool]) -> list[float]:
        """When (read time) each reply end was read among the output no call claimed, after `after`."""
        return [r.read_at for r in self._pending if r.read_at > after and ends(r.text)]

    def call_from_output(self, now: float, since: float, until: float) -> CallEvidence:
        """An iteration seen only in the output: the loop's output no call claimed, read after `since` and
        up to `until` (the end of a reply), begun and ended at once."""
        self.number += 1
        call = CallEvidence(self.number, now, since, announced_at=since)
        kept: deque[OutputResult] = deque()
        for result in self._pending:
            if since < result.read_at <= until:
                self._give(call, result)
                self._pending_bytes -= result.nbytes
            else:
                kept.append(result)
        self._pending = kept
        call.ended_wall = until
        return call

    def ignore_process(self, pid: int, create_time: float) -> None:
        """Never start a call for this process (e.g. the call that was running when a trial began)."""
        self._skip.add((pid, create_time))
        if len(self._skip) > 1024:
            self._skip.clear()
            self._skip.add((pid, create_time))

    def knows(self, pid: int, create_time: float) -> bool:
        """Has a call begun (or been ruled out) for this process already?"""
        return (pid, create_time) in self._skip

    def new_call_candidate(self, processes: Iterable[tuple[int, float, str, Sequence[str]]]) -> tuple[int, float] | None:
        """Among agent calls (pid, create_time, name, cmdline), the oldest not seen before, or None (a
        package runner and the agent it starts are both calls: the runner, older, is the one)."""
        found = [(ctime, pid) for pid, ctime, _name, _cmdline in processes if (pid, ctime) not in self._skip]
        if not found:
            return None
        ctime, pid = min(found)
        return pid, ctime

    def add_output(self, result: OutputResult, wall: float) -> None:
        """Route a chunk's findings to its call (in marker mode, the call in progress)."""
        if self.marker is not None:
            # Output analysed after the call was ended (the loop exited) is still that call's.
            target = self.current or next(reversed(self._closing.values()), None)
            if target is not None:
                self._give(target, result)
            else:
                self.owned(result, self.number)
            return
        call = self._owner(result)
        if call is not None:
            self._give(call, result)
            return
        # Read while no call ran: the loop's own output, or a call's whose start is not processed yet (it
        # claims it when it starts), or the last call's late words (it claims them when it reports).
        self.loop_errors.extend(result.errors)
        if result.text is not None:
            seconds = announced_wait(result.text)
            if seconds is not None:
                self.loop_wait_until = max(self.loop_wait_until, result.read_at + seconds)
        self._pending.append(result)
        self._pending_bytes += result.nbytes
        while self._pending and (self._pending_bytes > PENDING_MAX_BYTES
                                 or self._pending[0].read_at < wall - PENDING_SECONDS):
            dropped = self._pending.popleft()
            self._pending_bytes -= dropped.nbytes
            self.owned(dropped, self.number)  # the loop's own, or a call's too late to tell

    def _give(self, call: CallEvidence, result: OutputResult) -> None:
        call.add(result)
        self.owned(result, call.number)

    def _owner(self, result: OutputResult) -> CallEvidence | None:
        """The call whose stretch of the stream holds this output; for calls without marks, the call that was
        running when it was read (the latest start before the read)."""
        best: CallEvidence | None = None
        for call in (*self._closing.values(), self.current):
            if call is None:
                continue
            owns = call.owns(result)
            if owns is not None:
                if owns:
                    return call
                continue
            if call.begins_at > result.read_at:
                continue
            if call.ended_wall is not None and result.read_at > call.ended_wall:
                continue
            if best is None or call.begins_at >= best.begins_at:
                best = call
        return best

    def claim_late_output(self, call: CallEvidence) -> None:
        """The output read within SETTLE_SECONDS after `call` ended, before the next call began, is its own
        (a `tee` behind the agent writes its last line late; the pipe was read late). Call this when its
        settle time is over."""
        if call.ended_wall is None:
            return
        until = call.ended_wall + SETTLE_SECONDS
        nxt = self.current.begins_at if self.current is not None and self.current is not call else None
        # A call that already ended its reply has no second one: a reply end read after it is the next
        # call's, too short to be seen (and what comes after it too).
        replied = bool(call.text) and reply_ends_in(call.text[-1])
        kept: deque[OutputResult] = deque()
        for result in self._pending:
            owns = call.owns(result)
            if owns is None:
                if replied and reply_ends_in(result.text):
                    until = min(until, result.read_at - 1e-6)
                owns = call.begins_at <= result.read_at <= until and (nxt is None or result.read_at < nxt)
            if owns:
                self._give(call, result)
                self._pending_bytes -= result.nbytes
            else:
                kept.append(result)
        self._pending = kept


_ANNOUNCED_WAIT = re.compile(
    r"\bSleeping for (\d{1,6}) seconds\b|\bWaiting (\d{1,5}) minutes? before retrying\b")
"""What Ralph's loop (frankbria/ralph-claude-code, ralph_loop.sh) prints before it waits on purpose: for its
hourly call limit (`wait_for_reset`: "Sleeping for N seconds until next hour...") and after an agent's
usage limit ("Waiting 60 minutes before retrying...")."""


def announced_wait(text: str) -> float | None:
    """Seconds the loop says it will now wait without calling its agent (the last such line), else None. Pure.
    It reads every chunk of the loop's own output on the event loop: the substring tests (fast scans in C) spare
    the expression almost all of it (without them, 20 ms per MiB of output, a fifth of the tap's speed)."""
    if "Sleeping for " not in text and " before retrying" not in text:
        return None
    found = None
    for match in _ANNOUNCED_WAIT.finditer(text):
        found = float(match.group(1)) if match.group(1) else float(match.group(2)) * 60.0
    return found


def marker_pieces(block: bytes, text: str, marker: re.Pattern[str]) -> list[tuple[bytes, str, bool]]:
    """Marker mode: a block of complete lines (and its decoded text) cut before each line the marker matches,
    as (bytes, text, starts an iteration) in order. Pure; runs on the analysis thread, so that each piece's
    errors are found in that piece alone and the event loop only routes the pieces."""
    lines = text.split("\n")
    marks = [index for index, line in enumerate(lines) if marker.search(line)]
    if not marks:
        return [(block, text, False)]
    # Decoding keeps every b"\n" (no UTF-8 sequence, valid or not, holds one), so line i is line i of both.
    raw = block.split(b"\n")
    bounds = ([0] if marks[0] > 0 else []) + marks + [len(lines)]
    marked = set(marks)
    return [(b"\n".join(raw[start:end]), "\n".join(lines[start:end]), start in marked)
            for start, end in zip(bounds, bounds[1:])]


def build_report(
    call: CallEvidence,
    *,
    ended_at: float,
    files_changed: int,
    changed_paths: Sequence[str],
    commits: int,
    agent: object | None,
    signatures: frozenset[str],
    timed_out: bool = False,
    exit_status: int | None = None,
    returned_to: int | None = None,
    killed_by: int | None = None,
) -> IterationReport:
    """Combine a call's evidence, its workspace delta and its parsed agent output into the report."""
    reply = getattr(agent, "reply", None)
    failed = bool(getattr(agent, "failed", False)) or timed_out or killed_by is not None
    if exit_status not in (None, 0) and call.output_bytes == 0:
        failed = True  # it said nothing and exited non-zero: no result, whatever its format
    usage_limited = bool(getattr(agent, "usage_limited", False))
    outage = bool(getattr(agent, "outage", False)) and not usage_limited
    if usage_limited or outage:
        failed = False
    status = dict(getattr(agent, "status", {}) or {})
    tokens = getattr(agent, "tokens", 0)
    cost = getattr(agent, "cost_usd", None)
    return IterationReport(
        number=call.number,
        started_at=call.started_wall,
        ended_at=ended_at,
        files_changed=files_changed,
        changed_paths=tuple(changed_paths)[:50],
        commits=commits,
        output_bytes=call.output_bytes,
        error_signatures=signatures,
        error_lines=tuple(call.error_lines[:20]),
        reply=None if failed else reply,
        tokens=None if tokens is None else int(tokens),
        cost_usd=None if cost is None else float(cost),
        agent=str(getattr(agent, "agent", "") or ""),
        exit_status=exit_status,
        killed_by=killed_by,
        failed=failed,
        timed_out=timed_out,
        usage_limited=usage_limited,
        limit_resets_at=getattr(agent, "limit_resets_at", None) if usage_limited else None,
        returned_to=returned_to if files_changed else None,
        blocked=bool(getattr(agent, "blocked", False)),
        blocked_reason=str(getattr(agent, "blocked_reason", "") or ""),
        completed=bool(getattr(agent, "exit_signal", False)),
        status=status,
        session_id=str(getattr(agent, "session_id", "") or ""),
        cut_short=call.cut_short,
        states_blocker=not failed and not outage and states_blocker(reply, status),
        outage=outage,
        outage_message=str(getattr(agent, "outage_message", "") or "") if outage else "",
    )
