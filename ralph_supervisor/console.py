"""The supervisor's lines for a person at a terminal (`--log-format console`): short, and what matters stands out.

`events.jsonl` keeps every event with all its fields; on the terminal a person needs one short line per
iteration (time, number, outcome mark, files, commits, tokens, dollars, the start of the reply) that fits
`WIDTH` columns, and the lines that change what happens (a breaker transition, a stop, a limit wait) set
apart with a word in capitals (and colour where the terminal has it), the reason in full. Warnings are said
once each, in plain words; the rest of the events are for the file.

`detail`: `normal` (the above), `quiet` (only the transitions and errors), `verbose` (every event with all
its fields, as structlog's key=value console shows them).

    >>> render = ConsoleLines(colors=False)
    >>> render({"event": "breaker_transition", "to": "OPEN", "trigger": "no-progress", "reason": "stuck",
    ...         "ts": "2026-12-02T02:43:37.386Z"})[10:]
    'OPEN no-progress: stuck'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.cells import cell_len

from ralph_supervisor import events
from ralph_supervisor.format import dollars, duration, time_of_day, tokens
from ralph_supervisor.event_fields import (
    ChildExited,
    IterationFinished,
    LimitWaitStarted,
    OutageEnded,
    OutageStarted,
    SupervisorStarted,
    TreeStopped,
    UsageHigh,
)
from ralph_supervisor.outcomes import STATE_STYLE, WORD_WIDTH, breaker_label
from ralph_supervisor.text import clip, one_line
from ralph_supervisor.values import as_float, as_int, as_opt_int, as_text, parse_time

WIDTH = 100
"""An iteration's line is at most this many columns."""

_RESET = "\x1b[0m"
_COLOR = {"green": "\x1b[32m", "yellow": "\x1b[33m", "red": "\x1b[31m", "blue": "\x1b[34m", "magenta": "\x1b[35m",
          "dim": "\x1b[2m", "bold": "\x1b[1m", "bold red": "\x1b[1;31m", "bold yellow": "\x1b[1;33m",
          "bold green": "\x1b[1;32m", "bold blue": "\x1b[1;34m"}

QUIET_EVENTS = frozenset({events.BREAKER_TRANSITION, events.LIMIT_WAIT_STARTED, events.LIMIT_WAIT_ENDED,
                          events.BREAKER_FINAL, events.OUTAGE_STARTED, events.OUTAGE_ENDED})
"""What `--quiet` still prints (with errors and the end of the run)."""
WAIT_WORDS = {"limit": "LIMIT wait", "ceiling": "CEILING wait", "outage": "OUTAGE wait"}
"""The first words of a freeze's line, by its kind (`limit_wait.Wait.kind`)."""


def clock(record: Mapping[str, Any]) -> str:
    """`HH:MM:SS` in local time of the event's `ts` (blanks when it has none, or no such time)."""
    return _clock(record.get("ts"))


def _clock(moment: Any, form: str = "%H:%M:%S") -> str:
    return time_of_day(moment, form, otherwise=" " * 8)


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


_CONTROLS = dict.fromkeys([*range(0, 32), 127, *range(0x80, 0xA0)], " ")


def fit(text: object, cells: int) -> str:
    """`text` on one line, without control characters (an escape in a reply must not reach the terminal),
    cut to at most `cells` terminal cells (wide characters count two) with an ellipsis."""
    flat = one_line(str(text).translate(_CONTROLS), 2000)
    if cell_len(flat) <= cells:
        return flat
    out, used = [], 0
    for char in flat:
        width = cell_len(char)
        if used + width > cells - 1:
            break
        out.append(char)
        used += width
    return "".join(out) + "…"


def words_of(event: str) -> str:
    """`child_log_unwritable` -> `child log unwritable`: an event name said in words."""
    return event.replace("_", " ").strip()


def _text(value: Any, limit: int) -> str:
    """A field as one line of text, without control characters."""
    return as_text(value, limit).translate(_CONTROLS)


class ConsoleLines:
    """Renders one event dict as the person's line (None: nothing on the terminal for this event).

    Not pure only in one way: it remembers which warnings it said, to say each once."""

    def __init__(self, *, colors: bool, detail: str = "normal", width: int = WIDTH) -> None:
        self.colors = colors
        self.detail = detail
        self.width = width
        self._warned: set[str] = set()

    def __call__(self, record: Mapping[str, Any]) -> str | None:
        name = _text(record.get("event"), 80)
        level = _text(record.get("level"), 20)
        if level in ("error", "critical", "exception"):
            return self._problem("error", name, record)
        if self.detail == "quiet" and name not in QUIET_EVENTS:
            return None
        if level == "warning":
            if name in self._warned:
                return None
            self._warned.add(name)
            return self._problem("warning", name, record)
        render = getattr(self, f"_on_{name}", None)
        return None if render is None else render(record)

    # ------------------------------------------------------------------ pieces

    def _paint(self, text: str, style: str) -> str:
        code = _COLOR.get(style) if self.colors else None
        return f"{code}{text}{_RESET}" if code else text

    def _line(self, record: Mapping[str, Any], text: str) -> str:
        return f"{clock(record)}  {text}"

    def _problem(self, kind: str, name: str, record: Mapping[str, Any]) -> str:
        said = next((_text(record.get(k), 400) for k in ("detail", "error", "reason", "message")
                     if record.get(k) not in (None, "")), "")
        text = f"{kind}: {words_of(name)}" + (f": {said}" if said else "")
        return self._line(record, self._paint(text, "yellow" if kind == "warning" else "bold red"))

    # ------------------------------------------------------------------ the events a person reads

    def _on_iteration_finished(self, r: Mapping[str, Any]) -> str:
        """`02:43:30  #12  ✔ progress     3 files  1 commit   12.3k tok  $0.04  Implemented step 1.`"""
        done = IterationFinished.of(r)
        outcome = done.said()
        number = done.iteration
        head = f"{clock(r)}  {'#' + str(number) if number is not None else '#?':<5} "
        counts = (f"{_plural(done.files_changed, 'file'):>8}  {_plural(done.commits, 'commit'):<9}"
                  f" {tokens(done.tokens):>9} {dollars(done.cost_usd, brief=True):>6}")
        plain_mark = f"{outcome.mark} {outcome.word:<{WORD_WIDTH}}"
        say = _text(done.first_error, 300) if outcome.key in ("failed", "blocked") else ""
        say = say or _text(done.blocked_reason or done.reply, 300)
        used = len(head) + len(plain_mark) + 2 + len(counts)
        room = self.width - used - 2
        tail = f"  {fit(say, room)}" if say and room >= 8 else ""
        return head + self._paint(plain_mark, outcome.style) + "  " + counts + tail

    def _on_breaker_transition(self, r: Mapping[str, Any]) -> str:
        to = _text(r.get("to"), 20)
        trigger = _text(r.get("trigger"), 40)
        reason = _text(r.get("reason"), 2000)
        label = breaker_label(to, trigger)
        if to == "OPEN" and r.get("final") is True:
            label += " (for good)"
        return self._line(r, self._paint(label, STATE_STYLE.get(to, "bold")) + (f": {reason}" if reason else ""))

    def _on_breaker_still_open(self, r: Mapping[str, Any]) -> str:
        left = as_float(r.get("seconds_left"))
        wait = f" (half-open in {duration(left)})" if left else ""
        return self._line(r, self._paint(f"OPEN {_text(r.get('trigger'), 40)}", "bold red")
                          + f": still open from the last run{wait}: {_text(r.get('reason'), 2000)}")

    def _on_breaker_final(self, r: Mapping[str, Any]) -> str:
        return self._line(r, self._paint("OPEN for good", "bold red") + f": {_text(r.get('reason'), 2000)}")

    def _on_limit_wait_started(self, r: Mapping[str, Any]) -> str:
        wait = LimitWaitStarted.of(r)
        until = wait.until
        at = _clock(until, "%H:%M").strip() or "?"
        left = f" ({duration(until - (parse_time(r.get('ts')) or until))})" if until is not None else ""
        word = WAIT_WORDS.get(_text(wait.kind, 20), "LIMIT wait")
        return self._line(r, self._paint(f"{word} until {at}{left}", "bold blue")
                          + f": {_text(wait.reason, 1000)}; the tree is frozen, `ralph-supervise resume` ends the wait")

    def _on_limit_wait_ended(self, r: Mapping[str, Any]) -> str:
        return self._line(r, self._paint("LIMIT over", "bold blue") + f": {_text(r.get('why'), 300)}")

    def _on_outage_started(self, r: Mapping[str, Any]) -> str:
        outage = OutageStarted.of(r)
        since = _clock(outage.since, "%H:%M").strip() or "?"
        return self._line(r, self._paint(f"OUTAGE since {since}", "bold blue")
                          + f": the agent cannot reach its API ({_text(outage.message, 300)}); nothing is counted, "
                            f"the breaker stays CLOSED")

    def _on_outage_ended(self, r: Mapping[str, Any]) -> str:
        over = OutageEnded.of(r)
        return self._line(r, self._paint("OUTAGE over", "bold blue")
                          + (f" after {duration(over.seconds)}" if over.seconds else "") + f": {_text(over.why, 300)}")

    def _on_usage_high(self, r: Mapping[str, Any]) -> str:
        said = []
        for window in (UsageHigh.of(r).windows or ())[:6]:
            figure = window.utilization
            resets = _clock(window.resets_at, "%H:%M").strip()
            said.append(f"{_text(window.window, 40)} at {'?' if figure is None else f'{figure:g}'} %"
                        + (f" (resets {resets})" if resets else ""))
        return self._line(r, self._paint("USAGE", "bold yellow") + ": " + ", ".join(said))

    def _on_tree_stopped(self, r: Mapping[str, Any]) -> str:
        stopped = TreeStopped.of(r)
        survivors = stopped.survivors
        why = _text(stopped.reason, 60).replace("_", " ")
        left = self._paint(f", {survivors} survived", "bold red") if survivors else ", nothing left behind"
        return self._line(r, self._paint("STOP", "bold") + f" the tree ({why}){left}")

    def _on_tree_paused(self, r: Mapping[str, Any]) -> str:
        return self._line(r, f"paused the tree ({_plural(as_int(r.get('processes')), 'process', 'processes')})")

    def _on_tree_resumed(self, r: Mapping[str, Any]) -> str:
        return self._line(r, f"resumed the tree ({_plural(as_int(r.get('processes')), 'process', 'processes')})")

    def _on_child_started(self, r: Mapping[str, Any]) -> str:
        command = r.get("command")
        text = " ".join(str(c) for c in command) if isinstance(command, list) else _text(command, 200)
        return self._line(r, clip(f"started the loop (pid {as_opt_int(r.get('pid'))}): {one_line(text, 500)}",
                                  self.width - 10))

    def _on_child_exited(self, r: Mapping[str, Any]) -> str:
        return self._line(r, f"the loop exited with code {ChildExited.of(r).code}")

    def _on_supervisor_started(self, r: Mapping[str, Any]) -> str:
        started = SupervisorStarted.of(r)
        return self._line(r, f"ralph-supervise watching {_text(started.workspace, 300)}"
                          f" (state in {_text(started.state_dir, 300)})")

    def _on_signal_received(self, r: Mapping[str, Any]) -> str:
        return self._line(r, self._paint(f"{_text(r.get('signal'), 20)}", "bold")
                          + f": {_text(r.get('action'), 100)}")


def verbose_lines(colors: bool) -> Any:
    """Every event with all its fields: structlog's key=value console (what `--verbose` shows)."""
    import structlog

    return structlog.dev.ConsoleRenderer(colors=colors)
