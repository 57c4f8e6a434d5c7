"""`history.jsonl`: one JSON line per breaker transition, appended, rotated under a budget, never rewritten.

A line is `{"ts", "iteration", "from", "to", "trigger", "reason"}` (`ts` ISO-8601 UTC with milliseconds),
made from the breaker's `Decision` by `entry`, whoever writes it (the supervisor, or `reset` without one),
and read back as a `Transition` (`transition`, `read_transitions`): the readers name no key of a line.

    >>> history = History(Path("/tmp/ralph-example/.ralph-supervise"))
    >>> history.record(decision)      # doctest: +SKIP
    >>> tail(Path("/tmp/ralph-example/.ralph-supervise"), 20)  # the last 20 transitions, oldest first
    []
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ralph_supervisor import store
from ralph_supervisor.breaker import Decision
from ralph_supervisor.rotating import RotatingFile, read_json_lines, tail_lines
from ralph_supervisor.values import as_opt_int, as_text, parse_json_lines, parse_time

NAME = "history.jsonl"
MAX_BYTES = 1_000_000
TOTAL_BYTES = 5_000_000
TAIL_BYTES = 64 * 1024


def path(state_dir: Path) -> Path:
    return state_dir / NAME


def entry(decision: Decision, ts: str | None = None) -> dict[str, Any]:
    """The history line of a transition."""
    return {
        "ts": ts or store.iso_utc(),
        "iteration": decision.iteration,
        "from": decision.from_state.value,
        "to": decision.state.value,
        "trigger": decision.trigger,
        "reason": decision.reason,
    }


class History:
    """The appender: whole lines only (a short write on a full disk is taken back), rotated by size."""

    def __init__(self, state_dir: Path, on_error: Callable[[OSError], None] | None = None) -> None:
        self._file = RotatingFile(path(state_dir), MAX_BYTES, TOTAL_BYTES, whole_lines=True, on_error=on_error)

    def record(self, decision: Decision) -> dict[str, Any]:
        """Append the transition's line durably (fsync): a transition is rare and must survive any crash."""
        line = entry(decision)
        self._file.write((json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))
        self._file.sync()
        return line

    def files(self) -> list[Path]:
        return self._file.files()

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class Transition:
    """A line as a reader takes it: every field checked, texts clipped, "" where the line has none."""

    ts: str
    """The time as written (a view shows it as it is when it is not a time)."""
    at: float | None
    """The same as epoch seconds, or None."""
    iteration: int | None
    from_state: str
    to_state: str
    trigger: str
    reason: str


def transition(line: Mapping[str, Any]) -> Transition:
    """The transition a line records (any JSON object: a damaged line gives empty fields, never an error)."""
    ts = line.get("ts") or line.get("timestamp")
    return Transition(ts=as_text(ts, 40), at=parse_time(ts), iteration=as_opt_int(line.get("iteration")),
                      from_state=as_text(line.get("from"), 20), to_state=as_text(line.get("to"), 20),
                      trigger=as_text(line.get("trigger"), 40), reason=as_text(line.get("reason"), 300))


def transitions(lines: Iterable[Mapping[str, Any]]) -> list[Transition]:
    """The lines that record a transition (they name a `from` or a `to`), in order."""
    return [transition(line) for line in lines if "to" in line or "from" in line]


def read_transitions(state_dir: Path) -> tuple[list[Transition], list[str]]:
    """`read_all`, as transitions."""
    lines, warnings = read_all(state_dir)
    return transitions(lines), warnings


def tail(state_dir: Path, count: int) -> list[dict[str, Any]]:
    """The last `count` transitions of the current file, oldest first (unreadable lines skipped)."""
    try:
        lines, _ = tail_lines(path(state_dir), TAIL_BYTES, last_unended=True)
    except OSError:
        return []
    return parse_json_lines(lines[-count:])[0] if count > 0 else []


def read_all(state_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every transition still on disk, oldest first (rotated files included), and one warning per damaged file."""
    return read_json_lines(path(state_dir))
