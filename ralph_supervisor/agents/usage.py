"""How full the agent's usage windows are, as the agent itself reports them: pure readers of its events.

A subscription's windows (five hours, seven days, per model) are shared with the person's own work, so the
supervisor stops new work near a ceiling instead of waiting for the limit (`usage_headroom.py`). The figures
come from the agents' own reports:

- Claude Code (stream-json): `{"type": "rate_limit_event", "rate_limit_info": {"status": "allowed" |
  "allowed_warning" | "rejected", "rateLimitType": "five_hour" | "seven_day" | ..., "resetsAt": <epoch s>,
  "utilization": <0-100, in many versions>, "isUsingOverage": <bool>}}`.
- Codex: `rate_limits {primary, secondary: {used_percent, window_minutes, resets_at | resets_in_seconds}}` in
  the `token_count` events of its session files (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*-<thread_id>.jsonl`,
  `{"type": "event_msg", "payload": {"type": "token_count", "rate_limits": ...}}`), and in its JSON output
  where a version prints them.

Bad figures (a string, a bool, NaN, utilization outside 0-100, a reset time in the past or further ahead than
a seven-day window can be) are dropped field by field and named in `problems`, never raised.

    >>> report = claude_windows([{"type": "rate_limit_event", "rate_limit_info": {"status": "allowed",
    ...     "rateLimitType": "five_hour", "resetsAt": 1_000_3600, "utilization": 80}}], now=1_000_0000.0)
    >>> report.windows[0].name, report.windows[0].utilization
    ('five_hour', 80.0)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

RESET_HORIZON_S = 7 * 86400.0 + 3600.0
"""A window's reset further ahead than this (a seven-day window and an hour of skew) is not believed."""
SESSION_TAIL_BYTES = 1 << 20
"""Only the end of a Codex session file is read: the last `token_count` is the current figure."""
SESSION_DAYS = 3
"""Codex's session folders searched for a thread's file: today's and the days before (UTC and local)."""
_CODEX_WINDOWS = {300: "five_hour", 10080: "seven_day"}


@dataclass(frozen=True)
class UsageWindow:
    """One usage window as the agent reported it at the end of a call."""

    name: str
    """`five_hour`, `seven_day`, `seven_day_opus`, ... (Codex's windows by their length: `five_hour`, `seven_day`,
    else `<N>_minute`)."""
    utilization: float | None
    """Percent used (0-100); None when the agent did not say (or said something unreadable)."""
    resets_at: float | None
    """When the window resets (epoch seconds), when believable."""
    status: str = ""
    """Claude's `status`: allowed, allowed_warning, rejected ("" for Codex)."""

    def to_dict(self) -> dict[str, Any]:
        from ralph_supervisor.store import iso_utc

        return {"window": self.name, "utilization": self.utilization,
                "resets_at": None if self.resets_at is None else iso_utc(self.resets_at), "status": self.status or None}


@dataclass(frozen=True)
class UsageReport:
    """What one call said about its usage windows."""

    windows: tuple[UsageWindow, ...] = ()
    overage: bool = False
    """The call reported that it is using paid overage (Claude's `isUsingOverage: true`)."""
    problems: tuple[str, ...] = ()
    """Fields that were present but unreadable, one short phrase each (said once by the supervisor)."""
    source: str = ""
    """Where the figures came from: `events`, or the session file's path."""

    @property
    def reported(self) -> bool:
        return bool(self.windows) or self.overage


@dataclass
class _Collect:
    now: float
    windows: dict[str, UsageWindow] = field(default_factory=dict)
    overage: bool = False
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if text not in self.problems and len(self.problems) < 8:
            self.problems.append(text)

    def percent(self, value: Any, what: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            self.problem(f"{what} is not a number ({_short(value)})")
            return None
        if not 0 <= value <= 100:
            self.problem(f"{what} {value:g} is outside 0-100")
            return None
        return float(value)

    def reset(self, value: Any, what: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            self.problem(f"{what} is not a time ({_short(value)})")
            return None
        seconds = float(value) / 1000.0 if value > 1e11 else float(value)  # milliseconds
        if seconds <= self.now:
            self.problem(f"{what} is in the past")
            return None
        if seconds > self.now + RESET_HORIZON_S:
            self.problem(f"{what} is more than 7 days ahead")
            return None
        return seconds

    def add(self, window: UsageWindow) -> None:
        self.windows[window.name] = window  # the last report of a window is its figure

    def report(self, source: str) -> UsageReport:
        return UsageReport(tuple(self.windows.values()), self.overage, tuple(self.problems), source)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 30 else text[:29] + "…"


def claude_windows(events: Iterable[dict[str, Any]], now: float) -> UsageReport:
    """The windows of Claude's `rate_limit_event`s (the last one of each window counts)."""
    found = _Collect(now)
    for event in events:
        if event.get("type") != "rate_limit_event":
            continue
        info = event.get("rate_limit_info")
        if not isinstance(info, dict):
            found.problem("rate_limit_event without rate_limit_info")
            continue
        name = info.get("rateLimitType")
        if not isinstance(name, str) or not name.strip() or len(name) > 40:
            name = "unnamed"
        status = info.get("status")
        status = status.strip().lower() if isinstance(status, str) else ""
        if info.get("isUsingOverage") is True:
            found.overage = True
        if name == "overage":
            continue  # the overage pool itself: `isUsingOverage` says whether it is being spent
        found.add(UsageWindow(name, found.percent(info.get("utilization"), f"{name} utilization"),
                              found.reset(info.get("resetsAt"), f"{name} resetsAt"), status))
    return found.report("events")


def codex_windows(events: Iterable[dict[str, Any]], now: float, source: str = "events") -> UsageReport:
    """The windows of Codex's `rate_limits` objects, wherever an event carries one (top level, or in its
    `payload` / `msg`, as the session file's `token_count` events do); the last one counts."""
    found = _Collect(now)
    for event in events:
        limits = _rate_limits(event)
        if limits is None:
            continue
        for slot in ("primary", "secondary"):
            window = limits.get(slot)
            if not isinstance(window, dict):
                continue  # null in `exec --json` output: nothing said
            minutes = window.get("window_minutes")
            if isinstance(minutes, (int, float)) and not isinstance(minutes, bool) and math.isfinite(minutes) \
                    and minutes > 0:
                name = _CODEX_WINDOWS.get(int(minutes), f"{int(minutes)}_minute")
            else:
                name = slot
            resets = window.get("resets_at")
            if resets is None and isinstance(window.get("resets_in_seconds"), (int, float)) \
                    and not isinstance(window.get("resets_in_seconds"), bool):
                resets = now + window["resets_in_seconds"]
            found.add(UsageWindow(name, found.percent(window.get("used_percent"), f"{name} used_percent"),
                                  found.reset(resets, f"{name} resets_at")))
    return found.report(source)


def _rate_limits(event: dict[str, Any]) -> dict[str, Any] | None:
    for holder in (event, event.get("payload"), event.get("msg")):
        if isinstance(holder, dict) and isinstance(holder.get("rate_limits"), dict):
            return holder["rate_limits"]
    return None


# --- Codex's session file (I/O at the edge: a few small reads at a call's end) -------------------------------


def codex_home(env: dict[str, str] | None = None) -> Path:
    """`$CODEX_HOME`, else `~/.codex` (where the CLI keeps its sessions)."""
    env = os.environ if env is None else env
    home = env.get("CODEX_HOME", "").strip()
    return Path(home).expanduser() if home else Path("~/.codex").expanduser()


def codex_session_file(home: Path, thread_id: str, now: float) -> Path | None:
    """The session file of a thread: `sessions/YYYY/MM/DD/rollout-*-<thread_id>.jsonl`, in the folders of
    the last few days (never a walk of the whole tree: years of sessions may be there)."""
    if not thread_id or "/" in thread_id or "\0" in thread_id or len(thread_id) > 100:
        return None
    days = set()
    for back in range(SESSION_DAYS):
        for zone in (timezone.utc, None):
            days.add((datetime.fromtimestamp(now, zone) - timedelta(days=back)).strftime("%Y/%m/%d"))
    newest: tuple[float, Path] | None = None
    for day in sorted(days, reverse=True):
        folder = home / "sessions" / day
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.startswith("rollout-") and name.endswith(f"{thread_id}.jsonl"):
                path = folder / name
                try:
                    mtime = path.stat().st_mtime
                except OSError:
                    continue
                if newest is None or mtime > newest[0]:
                    newest = (mtime, path)
    return None if newest is None else newest[1]


def codex_session_windows(home: Path, thread_id: str, now: float) -> UsageReport:
    """The windows the thread's session file last recorded (an empty report when there is none)."""
    path = codex_session_file(home, thread_id, now)
    if path is None:
        return UsageReport()
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - SESSION_TAIL_BYTES))
            data = fh.read(SESSION_TAIL_BYTES)
    except OSError as exc:
        return UsageReport(problems=(f"cannot read {path}: {exc.strerror or exc}",))
    events = []
    for line in data.decode("utf-8", "replace").split("\n"):
        if '"rate_limits"' not in line:
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(event, dict):
            events.append(event)
    return codex_windows(events, now, source=str(path))
