"""structlog set-up: JSON lines to `events.jsonl` always, and one stream on stderr for humans.

Under `run` the stream is the terminal's (`ralph_supervisor/terminal/`): writing a line there only
queues it, so a terminal that stops reading never holds up the supervisor.

The last processor fans each event out to its sinks and drops it, so one event is rendered at most
twice (JSON for the file, console or JSON for stderr) and never through the stdlib logging tree.
The console form is a person's (`console.py`: one line per iteration, transitions set apart);
`detail="verbose"` shows every event with all its fields instead, `detail="quiet"` only the transitions.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import structlog

from ralph_supervisor.console import ConsoleLines, verbose_lines
from ralph_supervisor import masking
from ralph_supervisor.files import events_jsonl
from ralph_supervisor.rotating import RotatingFile
from ralph_supervisor.store import iso_utc

FILE_ONLY = "_file_only"
"""An event with this key set goes to events.jsonl only (`log.info("x", **{FILE_ONLY: True})`)."""


def _timestamp(_logger: Any, _name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    event_dict.setdefault("ts", iso_utc(time.time()))
    return event_dict


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    return repr(value)


class _Fanout:
    """The final processor: write the event to every sink, then drop it.

    Events may come from several threads (the terminal's writer logs what happens to the terminal):
    one at a time, so events.jsonl keeps whole lines and its rotation its count."""

    def __init__(self, events: RotatingFile | None, stream: TextIO | None, console: bool,
                 detail: str = "normal") -> None:
        self.events = events
        self.stream = stream
        colors = console and _colors(stream)
        self.console: Any = None
        if console:
            if detail == "verbose":
                self.console = verbose_lines(colors)
            else:
                lines = ConsoleLines(colors=colors, detail=detail)
                self.console = lambda _logger, _name, event_dict: lines(event_dict)
        self._lock = threading.Lock()

    def __call__(self, logger: Any, name: str, event_dict: dict[str, Any]) -> Any:
        file_only = event_dict.pop(FILE_ONLY, False)
        with self._lock:
            self._write(logger, name, event_dict, file_only)
        raise structlog.DropEvent

    def _write(self, logger: Any, name: str, event_dict: dict[str, Any], file_only: bool) -> None:
        line = masking.mask(json.dumps(event_dict, default=_json_default, ensure_ascii=False))
        if self.events is not None:
            self.events.write(line.encode("utf-8", "replace") + b"\n")
        if self.stream is not None and not file_only:
            try:
                if self.console is not None:
                    text = self.console(logger, name, dict(event_dict))
                    if text is None:
                        return
                    text = masking.mask(text)
                    self.stream.write(f"{text}\n")
                else:
                    self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass


def _colors(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except ValueError:
        return False


def for_people(log_format: str, stream: TextIO | None) -> bool:
    """The console form (not JSON) on `stream`: asked for, or `auto` on a terminal."""
    return log_format == "console" or (log_format == "auto" and _colors(stream))


def colors_on(stream: TextIO | None) -> bool:
    """Colour for `stream`: a terminal."""
    return _colors(stream)


def configure_logging(events_path: Path | None, log_format: str = "auto", stream: TextIO | None = None,
                      detail: str = "normal") -> RotatingFile | None:
    """Route structlog events to `events_path` (JSON lines, rotated) and to `stream` (default stderr).
    `detail` (normal, quiet, verbose) is how much of it the console form shows."""
    stream = sys.stderr if stream is None else stream
    console = for_people(log_format, stream)
    events = None
    if events_path is not None:
        events = RotatingFile(events_path, events_jsonl.MAX_BYTES, events_jsonl.TOTAL_BYTES, whole_lines=True,
                              on_error=lambda exc: _warn_once(stream, events_path, exc))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _timestamp,
            structlog.processors.format_exc_info,
            _Fanout(events, stream, console, detail),
        ],
        logger_factory=structlog.ReturnLoggerFactory(),
        cache_logger_on_first_use=False,
    )
    return events


def _warn_once(stream: TextIO, path: Path, exc: OSError) -> None:
    try:
        stream.write(f"ralph-supervise: warning: cannot write {path}: {exc.strerror or exc}; events go to stderr only\n")
    except (OSError, ValueError):
        pass
